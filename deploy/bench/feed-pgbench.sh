#!/usr/bin/env bash
# The change-feed trigger's cost to other writers, measured by pgbench alone
# (no gateway running, so no consumer shares the cores): concurrent
# single-row UPDATEs by primary key with the trigger disabled and enabled,
# rounds interleaved, for two writes: a no-op (`SET document = document`,
# the cheapest UPDATE there is) and a real change of the title.
#
# The database must be a scratch one with the migrations and listings
# 1..LISTINGS, for example the one that `go run ./deploy/bench -feed -quick
# -db feed_bench` leaves behind. Each round starts from an empty
# listing_changes (TRUNCATE), so do not point this at a database in use.
#
#   deploy/bench/feed-pgbench.sh feed_bench
#
# Environment: PGHOST (127.0.0.1), PGUSER (postgres), LISTINGS (10000),
# CLIENTS (8), ROUND_SECONDS (8), ROUNDS (3).
set -euo pipefail

db=${1:?usage: feed-pgbench.sh DATABASE}
export PGHOST=${PGHOST:-127.0.0.1} PGUSER=${PGUSER:-postgres}
listings=${LISTINGS:-10000} clients=${CLIENTS:-8} seconds=${ROUND_SECONDS:-8} rounds=${ROUNDS:-3}

work=$(mktemp -d)
trap 'rm -rf "$work"; psql -Atqd "$db" -c "ALTER TABLE listings ENABLE TRIGGER listings_change_feed" >/dev/null' EXIT
printf '\\set id random(1, %d)\nUPDATE listings SET document = document WHERE id = :id;\n' "$listings" >"$work/noop.sql"
printf '\\set id random(1, %d)\nUPDATE listings SET document = replace(document, %s, %s) WHERE id = :id;\n' \
	"$listings" "'\"title\":\"'" "'\"title\":\"x'" >"$work/title.sql"

round() { # write trigger(on|off)
	psql -Atqd "$db" -c "TRUNCATE listing_changes" \
		-c "ALTER TABLE listings $([ "$2" = on ] && echo ENABLE || echo DISABLE) TRIGGER listings_change_feed" \
		-c "CHECKPOINT" >/dev/null
	pgbench -n -M prepared -c "$clients" -j 2 -T "$seconds" -f "$work/$1.sql" "$db" 2>&1 |
		sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

echo "write trigger round tps"
for write in noop title; do
	: >"$work/$write.off" && : >"$work/$write.on"
	for r in $(seq "$rounds"); do
		for trigger in off on; do
			tps=$(round "$write" "$trigger")
			echo "$tps" >>"$work/$write.$trigger"
			echo "$write $trigger $r $tps"
		done
	done
	off=$(median <"$work/$write.off") on=$(median <"$work/$write.on")
	echo "$write: medians off $off, on $on tx/s: on/off $(awk -v a="$on" -v b="$off" 'BEGIN {printf "%.2f", a/b}')x"
done
