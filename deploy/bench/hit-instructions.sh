#!/usr/bin/env bash
# Instructions per in-process hot hit, this tree against an earlier
# commit, counted by callgrind: a measure that the machine's other work
# does not move, for changes to the hit path smaller than the release
# comparison's noise (-release: the kernel's write is half of a hit's CPU
# there, and its ratios vary by ±0.1 from one run to the next).
#
# Each build's gateway test binary runs the benchmark twice under
# callgrind, with N and 3N iterations; the difference over 2N is what one
# iteration costs (BenchmarkView's request reset included, the same in
# both builds), setup and the harness cancelling out. Go's map seeds move
# a run by about ±100 instructions.
#
#   deploy/bench/hit-instructions.sh 65008c9
#
# Environment: BENCH (BenchmarkView$/view_hit$), N (10000).
set -euo pipefail

rev=${1:?usage: hit-instructions.sh REV}
bench=${BENCH:-'BenchmarkView$/view_hit$'} n=${N:-10000}
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/old" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$root" worktree add --detach "$work/old" "$rev" >/dev/null 2>&1
(cd "$work/old" && go test -c -o "$work/old.test" ./gateway)
(cd "$root" && go test -c -o "$work/new.test" ./gateway)

count() { # tree binary iterations: the instructions of the whole run
	(cd "$1/gateway" && GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 valgrind --tool=callgrind \
		--callgrind-out-file=/dev/null "$2" -test.run '^$' -test.bench "$bench" -test.benchtime "$3x" 2>&1 |
		awk '/Collected :/ {print $NF}')
}
perhit() { # tree binary: instructions per iteration
	local a b
	a=$(count "$1" "$2" "$n") b=$(count "$1" "$2" $((3 * n)))
	echo $(((b - a) / (2 * n)))
}
old=$(perhit "$work/old" "$work/old.test")
new=$(perhit "$root" "$work/new.test")
printf '%s: %d instructions per iteration\nthis tree: %d\nthis tree / %s: %s\n' \
	"$rev" "$old" "$new" "$rev" "$(awk -v a="$new" -v b="$old" 'BEGIN {printf "%.3f", a / b}')"
