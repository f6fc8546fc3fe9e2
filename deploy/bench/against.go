package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The release comparison (-release, -against REV): this tree's gateway
// against an earlier commit's, interleaved, on the hot-hit and miss cases;
// the method is in METHODS.md, "The release comparison".

// releaseCases are the gateways of each build, with their settings.
var releaseCases = []struct {
	name    string
	sqlite  bool // the embedded store, without Redis
	miss    bool // every request a listing not read before (walk.lua), its Redis keys emptied before each run
	bare    bool // with miss: no Redis, a one-byte local tier
	comment string
}{
	{"local", false, false, false, "Redis configured, the default local tier: the hot listing from the local tier"},
	{"embedded", true, false, false, "SQLite, no Redis: the hot listing from the in-process tier"},
	{"miss", false, true, false, "Redis configured and emptied before each run, the default local tier, PostgreSQL: every request a listing not read before (raise -listings above a run's requests)"},
	{"miss-bare", false, true, true, "the same walk, PostgreSQL, no Redis and a one-byte local tier: a store read with no cache I/O, the floor under miss"},
}

// releaseTargets are issue 26's bounds: this tree against the release,
// and against fiber-static.
var releaseTargets = map[string]struct{ release, fiber float64 }{
	"local":    {1.0, 0.95},
	"embedded": {1.0, 0.9},
}

// releaseMissTarget is issue 31's bound on the store miss: this tree's
// server CPU per miss at most this share of the release's.
const releaseMissTarget = 0.6

// build is one side of the comparison.
type buildArm struct {
	label string // how the report names it
	lab   *lab
}

// releaseBench runs the release comparison and returns its report.
func releaseBench(ctx context.Context, opts options, root, work string) (string, error) {
	rev, err := gitOut(ctx, root, "rev-parse", "--verify", "--quiet", opts.against+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("-against %s: not a commit of this repository: %w", opts.against, err)
	}
	short, _ := gitOut(ctx, root, "rev-parse", "--short", rev)
	head, _ := gitOut(ctx, root, "rev-parse", "--short", "HEAD")
	if dirty, _ := gitOut(ctx, root, "status", "--porcelain", "--untracked-files=no"); dirty != "" {
		head += " with uncommitted changes"
	}
	oldTree := filepath.Join(work, "release-src")
	if _, err := gitOut(ctx, root, "worktree", "add", "--detach", oldTree, rev); err != nil {
		return "", fmt.Errorf("git worktree add %s: %w", short, err)
	}
	defer removeWorktree(root, oldTree)

	armOpts := opts
	armOpts.db = "" // each build its own new database: schemas differ between releases
	armOpts.cases, armOpts.miss, armOpts.longtail, armOpts.memory = false, false, false, false
	arms := []*buildArm{
		{label: short, lab: &lab{work: filepath.Join(work, "release"), root: oldTree, opts: armOpts}},
		{label: "this tree", lab: &lab{work: filepath.Join(work, "this"), root: root, opts: armOpts}},
	}
	for _, a := range arms {
		if err := os.Mkdir(a.lab.work, 0o755); err != nil {
			return "", err
		}
		defer a.lab.stopAll()
		if err := a.lab.prepare(ctx); err != nil { // builds, creates its database, seeds both stores
			return "", fmt.Errorf("%s: %w", a.label, err)
		}
	}
	settings, err := compareSettings(ctx, arms, arms[1].lab.gatewayEnv("GATEWAY_ADDR=", "GATEWAY_ADMIN_ADDR="))
	if err != nil {
		return "", err
	}
	for _, a := range arms {
		if err := a.lab.startRelease(ctx); err != nil {
			return "", fmt.Errorf("%s: %w", a.label, err)
		}
	}
	this := arms[1].lab
	file, err := this.bodyFile()
	if err != nil {
		return "", err
	}
	static, err := this.startStatic(ctx, false, file)
	if err != nil {
		return "", err
	}

	// Each repetition runs the two builds' case back to back, the order
	// flipped from one repetition to the next (so drift over a run favours
	// neither), and fiber-static between the two cases.
	type slot struct {
		arm  int // -1: fiber-static
		name string
	}
	order := func(rep int) []slot {
		a, b := 0, 1
		if rep%2 == 1 {
			a, b = 1, 0
		}
		return []slot{{a, "local"}, {b, "local"}, {-1, "fiber-static"}, {b, "embedded"}, {a, "embedded"}, {a, "miss"}, {b, "miss"}, {b, "miss-bare"}, {a, "miss-bare"}}
	}
	run := func(s slot, d time.Duration) (result, error) {
		if s.arm < 0 {
			return this.load(ctx, static, opts.conns, d, false, "")
		}
		l := arms[s.arm].lab
		return l.load(ctx, l.servers[s.name], opts.conns, d, false, "")
	}
	log.Print("warming up")
	for _, s := range order(0) {
		if _, err := run(s, 2*time.Second); err != nil {
			return "", err
		}
	}
	res := map[string][][]result{}
	for _, c := range releaseCases {
		res[c.name] = [][]result{nil, nil}
	}
	var fiber []result
	for rep := range opts.reps {
		log.Printf("repetition %d of %d", rep+1, opts.reps)
		for _, s := range order(rep) {
			r, err := run(s, opts.duration)
			if err != nil {
				return "", err
			}
			if s.arm < 0 {
				fiber = append(fiber, r)
			} else {
				res[s.name][s.arm] = append(res[s.name][s.arm], r)
			}
		}
	}
	var profiles strings.Builder
	if opts.profile && opts.profileSet {
		if err := profileRelease(ctx, &profiles, arms, opts.duration); err != nil {
			return "", err
		}
	}
	var w strings.Builder
	this.header(&w)
	fmt.Fprintf(&w, "This tree: %s. The release: %s (%s).\n", head, short, rev)
	releaseReport(&w, opts, arms, res, fiber, settings)
	w.WriteString(profiles.String())
	return w.String(), nil
}

// startRelease starts the build's two gateways, logs in and reads the hot
// listing from both, which must answer it with the same bytes.
func (l *lab) startRelease(ctx context.Context) error {
	for _, c := range releaseCases {
		var extra []string
		switch {
		case c.sqlite:
			extra = []string{"GATEWAY_STORE_URL=sqlite:" + filepath.Join(l.work, "embedded.db"), "GATEWAY_REDIS_URL="}
		case c.bare:
			extra = []string{"GATEWAY_REDIS_URL=", "GATEWAY_LOCAL_CACHE_BYTES=1"}
		}
		prefix := ""
		if c.miss && !c.bare {
			prefix = l.prefix + "miss:"
		}
		s, err := l.startGateway(ctx, c.name, false, prefix, extra...)
		if err != nil {
			return err
		}
		if c.miss {
			s.script = "walk.lua"
		}
	}
	if err := l.login(); err != nil {
		return err
	}
	for _, c := range releaseCases {
		req, _ := http.NewRequest(http.MethodGet, "http://"+l.servers[c.name].addr+"/realty/1", nil)
		req.Header.Set("Authorization", "Bearer "+l.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s /realty/1: %d %v", c.name, resp.StatusCode, err)
		}
		if l.body == nil {
			l.body = b
		} else if !bytes.Equal(b, l.body) {
			return fmt.Errorf("%s answers other bytes than %s", c.name, releaseCases[0].name)
		}
	}
	return l.awaitFeedDrained(ctx, feedSettleWait)
}

// settingsDiff is the configuration the two builds do not share.
type settingsDiff struct {
	onlyIn   [2][]string // settings one build has and the other lacks
	defaults []string    // "NAME: A → B" where the defaults differ
}

// helpLine is one setting of --help: "  GATEWAY_NAME   what (default V)".
var helpLine = regexp.MustCompile(`^\s+(GATEWAY_[A-Z0-9_]+)\s+(.*?)(?:\(default (.*)\))?$`)

// compareSettings reads both binaries' settings from their --help: each
// must know every GATEWAY_ setting of env (else it would run on a default
// where the other runs on the harness's value), and it returns what
// differs.
func compareSettings(ctx context.Context, arms []*buildArm, env []string) (settingsDiff, error) {
	var d settingsDiff
	var sets [2]map[string]string // name → default
	for i, a := range arms {
		cmd := exec.CommandContext(ctx, a.lab.gateway, "--help")
		out, _ := cmd.CombinedOutput() // --help may exit non-zero
		sets[i] = map[string]string{}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if m := helpLine.FindStringSubmatch(sc.Text()); m != nil {
				sets[i][m[1]] = m[3]
			}
		}
		if len(sets[i]) == 0 {
			return d, fmt.Errorf("%s: --help lists no GATEWAY_ settings:\n%s", a.label, out)
		}
		for _, kv := range env {
			name, _, _ := strings.Cut(kv, "=")
			if _, ok := sets[i][name]; !ok && strings.HasPrefix(name, "GATEWAY_") && name != "GATEWAY_CONFIG" {
				return d, fmt.Errorf("%s does not know the setting %s that the harness passes: teach releaseBench what it is called there", a.label, name)
			}
		}
	}
	for i := range 2 {
		for _, name := range slices.Sorted(maps.Keys(sets[i])) {
			if _, ok := sets[1-i][name]; !ok {
				d.onlyIn[i] = append(d.onlyIn[i], name)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(sets[0])) {
		if v, ok := sets[1][name]; ok && v != sets[0][name] {
			d.defaults = append(d.defaults, fmt.Sprintf("%s: %s → %s", name, orNone(sets[0][name]), orNone(v)))
		}
	}
	return d, nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// releaseReport writes the comparison: each case's medians, the ratio of
// this tree to the release (of the medians, and of each repetition's
// pair), the server CPU per request, and both against fiber-static.
func releaseReport(w *strings.Builder, opts options, arms []*buildArm, res map[string][][]result, fiber []result, sd settingsDiff) {
	old, cur := arms[0].label, arms[1].label
	fmt.Fprintf(w, "\n## Release comparison: %s against %s, wrk -t2 -c%d -d%v, %d interleaved repetitions, medians\n\n",
		cur, old, opts.conns, opts.duration, opts.reps)
	fmt.Fprintf(w, "Each build from its own tree, on its own PostgreSQL database, SQLite file and Redis key prefix; log level warn, the access log at its default; "+
		"the hot listing is %d bytes from %s and %d from %s. Server CPU per request: utime + stime of the gateway's process over the run, "+
		"divided by its requests (the median of the repetitions').\n\n", len(arms[0].lab.body), old, len(arms[1].lab.body), cur)
	for _, c := range releaseCases {
		fmt.Fprintf(w, "- %s: %s\n", c.name, c.comment)
	}
	w.WriteString("\n| case | build | requests/s | p99 | server CPU per request | served from memory | errors, non-2xx |\n|---|---|---:|---:|---:|---:|---:|\n")
	invalid := false
	for _, c := range releaseCases {
		for i, a := range arms {
			rs := res[c.name][i]
			r := median(rs)
			var errs, non2xx int64
			for _, x := range rs {
				errs, non2xx = errs+x.errors, non2xx+x.non2xx
			}
			invalid = invalid || errs > 0 || non2xx > 0
			fmt.Fprintf(w, "| %s | %s | %.0f | %s | %s | %s | %d, %d |\n", c.name, a.label, r.rps, ms(r.p99), us(medianCPU(rs)),
				memoryShare(rs, c.sqlite), errs, non2xx)
		}
	}
	f := median(fiber)
	fmt.Fprintf(w, "| fiber-static | — | %.0f | %s | %s | — | %d, %d |\n", f.rps, ms(f.p99), us(medianCPU(fiber)), f.errors, f.non2xx)
	if invalid {
		w.WriteString("\n**Some requests failed or were not answered 2xx: the figures above do not measure the hot hit.**\n")
	}
	for _, c := range releaseCases {
		for i, a := range arms {
			if r := median(res[c.name][i]); c.miss && r.requests > 0 && float64(r.tiers.loads) < 0.95*float64(r.requests) {
				fmt.Fprintf(w, "\n**%s, %s: only %d of %d requests were store reads: raise -listings.**\n", c.name, a.label, r.tiers.loads, r.requests)
			}
		}
	}

	w.WriteString("\n| ratio | of the medians | median of the pairs | each repetition's pair | target (of the medians) |\n|---|---:|---:|---|---|\n")
	cpu := func(rs []result) []float64 {
		return mapResults(rs, func(r result) float64 { return float64(r.cpuPerRequest) })
	}
	for _, c := range releaseCases {
		o, n := res[c.name][0], res[c.name][1]
		switch {
		case c.bare:
			row(w, fmt.Sprintf("%s: %s / %s, CPU per miss", c.name, cur, old), cpu(n), cpu(o), 0)
			rowAtMost(w, fmt.Sprintf("floor: %s's %s / %s's miss, CPU per miss", cur, c.name, old), cpu(n), cpu(res["miss"][0]), releaseMissTarget)
			continue
		case c.miss:
			row(w, fmt.Sprintf("%s: %s / %s, requests/s", c.name, cur, old), rps(n), rps(o), 0)
			rowAtMost(w, fmt.Sprintf("%s: %s / %s, CPU per miss", c.name, cur, old), cpu(n), cpu(o), releaseMissTarget)
			continue
		}
		t := releaseTargets[c.name]
		row(w, fmt.Sprintf("%s: %s / %s, requests/s", c.name, cur, old), rps(n), rps(o), t.release)
		row(w, fmt.Sprintf("%s: %s / %s, CPU per request", c.name, cur, old), cpu(n), cpu(o), 0)
		row(w, fmt.Sprintf("%s: %s / fiber-static, requests/s", c.name, cur), rps(n), rps(fiber), t.fiber)
		row(w, fmt.Sprintf("%s: %s / fiber-static, requests/s", c.name, old), rps(o), rps(fiber), 0)
	}

	w.WriteString("\nSettings the two builds do not share (from their --help; the harness sets none of them):\n\n")
	fmt.Fprintf(w, "- only in %s: %s\n", old, orNone(strings.Join(sd.onlyIn[0], ", ")))
	fmt.Fprintf(w, "- only in %s: %s\n", cur, orNone(strings.Join(sd.onlyIn[1], ", ")))
	fmt.Fprintf(w, "- defaults that differ (%s → %s): %s\n", old, cur, orNone(strings.Join(sd.defaults, "; ")))
}

// rowAtMost is row for a ratio whose target is a ceiling.
func rowAtMost(w *strings.Builder, name string, a, b []float64, target float64) {
	v := medianF(a) / medianF(b)
	var each []string
	var pairs []float64
	for i := range min(len(a), len(b)) {
		pairs = append(pairs, a[i]/b[i])
		each = append(each, fmt.Sprintf("%.2f", a[i]/b[i]))
	}
	verdict := fmt.Sprintf("≤ %.2f: met", target)
	if v > target+0.005 { // as printed
		verdict = fmt.Sprintf("≤ %.2f: missed", target)
	}
	fmt.Fprintf(w, "| %s | %.2f | %.2f | %s | %s |\n", name, v, medianF(pairs), strings.Join(each, ", "), verdict)
}

// row writes one ratio: a over b of the medians, and of each repetition
// (run back to back, so a slow drift of the machine cancels in a pair).
// target 0: none set.
func row(w *strings.Builder, name string, a, b []float64, target float64) {
	v := medianF(a) / medianF(b)
	var each []string
	var pairs []float64
	for i := range min(len(a), len(b)) {
		pairs = append(pairs, a[i]/b[i])
		each = append(each, fmt.Sprintf("%.2f", a[i]/b[i]))
	}
	verdict := "none set"
	if target > 0 {
		verdict = fmt.Sprintf("≥ %.2f: met", target)
		if v < target-0.005 { // as printed
			verdict = fmt.Sprintf("≥ %.2f: missed", target)
		}
	}
	fmt.Fprintf(w, "| %s | %.2f | %.2f | %s | %s |\n", name, v, medianF(pairs), strings.Join(each, ", "), verdict)
}

func rps(rs []result) []float64 { return mapResults(rs, func(r result) float64 { return r.rps }) }

func mapResults(rs []result, f func(result) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

func medianCPU(rs []result) time.Duration {
	return time.Duration(medianF(mapResults(rs, func(r result) float64 { return float64(r.cpuPerRequest) })))
}

// memoryShare is the share of the requests answered from the process's
// own memory: the local tier, or without Redis the in-process one.
func memoryShare(rs []result, redisless bool) string {
	var local, all uint64
	for _, r := range rs {
		local += r.tiers.local
		all += r.tiers.total()
	}
	if all == 0 {
		return "—"
	}
	return pct(float64(local) / float64(all))
}

// profileRelease records each build's gateways with perf under load and
// appends, per case, the share of the gateway's samples in each of its
// parts (profileParts) side by side, then the top of each profile.
func profileRelease(ctx context.Context, w *strings.Builder, arms []*buildArm, d time.Duration) error {
	if _, err := exec.LookPath("perf"); err != nil {
		w.WriteString("\nNo profiles: perf is not installed (Debian: linux-perf).\n")
		return nil
	}
	for _, c := range releaseCases {
		var tops strings.Builder
		shares := make([]map[string]float64, len(arms))
		for i, a := range arms {
			log.Printf("profiling %s %s", a.label, c.name)
			s := a.lab.servers[c.name]
			flat, cum, err := a.lab.profile(ctx, s, d)
			if err != nil {
				return err
			}
			if shares[i], err = partShares(ctx, filepath.Join(a.lab.work, s.name+".perf.data")); err != nil {
				return err
			}
			fmt.Fprintf(&tops, "\n#### %s, %s: by self time, then with callees\n\n```\n%s\n```\n\n```\n%s\n```\n",
				c.name, a.label, strings.Join(flat, "\n"), strings.Join(cum, "\n"))
		}
		fmt.Fprintf(w, "\n### Profiles of %s (perf -F 999 -g, %v of wrk load each, the gateway's process)\n\n", c.name, d)
		w.WriteString("Each sample counts once, for the innermost part on its stack (a sample in the view under the token check counts for the view).\n\n")
		fmt.Fprintf(w, "| part | %s | %s |\n|---|---:|---:|\n", arms[0].label, arms[1].label)
		for _, p := range profileParts {
			fmt.Fprintf(w, "| %s | %.1f %% | %.1f %% |\n", p.name, shares[0][p.name], shares[1][p.name])
		}
		w.WriteString(tops.String())
	}
	return nil
}

// profileParts name the parts of the hot hit whose share of a profile the
// release comparison reports, each by the prefixes of its functions.
var profileParts = []struct {
	name     string
	prefixes []string
}{
	{"the request frame (gateway frame, finish)", []string{"github.com/realty-gateway/gateway/gateway.(*Server).frame", "github.com/realty-gateway/gateway/gateway.(*Server).finish"}},
	{"the access log", []string{"github.com/realty-gateway/gateway/gateway.(*Server).accessLog"}},
	{"the metrics", []string{"github.com/realty-gateway/gateway/metrics."}},
	{"the token check (gateway requireToken, remembered, isRevoked)", []string{"github.com/realty-gateway/gateway/gateway.(*Server).requireToken", "github.com/realty-gateway/gateway/gateway.(*Server).remembered", "github.com/realty-gateway/gateway/gateway.(*Server).isRevoked"}},
	{"the revocations (revocation)", []string{"github.com/realty-gateway/gateway/revocation."}},
	{"the view (gateway view, cacheHeaders)", []string{"github.com/realty-gateway/gateway/gateway.(*Server).view", "github.com/realty-gateway/gateway/gateway.(*Server).cacheHeaders"}},
	{"the cache's lookup (cache Cached)", []string{"github.com/realty-gateway/gateway/cache.(*Cache).Cached"}},
	{"the local tier's get (cache front.get)", []string{"github.com/realty-gateway/gateway/cache.(*front).get"}},
	{"the change feed (feed)", []string{"github.com/realty-gateway/gateway/feed."}},
	{"the connection's deadlines (Set*Deadline)", []string{"net.(*conn).SetReadDeadline", "net.(*conn).SetWriteDeadline", "net.(*conn).SetDeadline",
		"github.com/realty-gateway/gateway/gateway.(*conn).Set"}},
	{"clock reads (time.Now, runtime.nanotime)", []string{"time.Now", "runtime.nanotime"}},
	{"allocation (runtime.mallocgc)", []string{"runtime.mallocgc"}},
	{"GC marking (runtime.gcBgMarkWorker)", []string{"runtime.gcBgMarkWorker"}},
	{"the response's write (syscall.write)", []string{"syscall.write"}},
	{"the request's read (syscall.read)", []string{"syscall.read"}},
}

// partShares reads a perf recording and returns the share of its samples
// in each of profileParts, each sample counted for the innermost part on
// its stack.
func partShares(ctx context.Context, data string) (map[string]float64, error) {
	out, err := exec.CommandContext(ctx, "perf", "script", "-i", data, "-F", "ip,sym").Output()
	if err != nil {
		return nil, fmt.Errorf("perf script: %w", err)
	}
	counts := map[string]int{}
	total := 0
	for block := range strings.SplitSeq(string(out), "\n\n") {
		lines := strings.Split(strings.TrimSpace(block), "\n")
		if len(lines) == 0 || lines[0] == "" {
			continue
		}
		total++
	stack: // leaf first
		for _, line := range lines {
			_, sym, _ := strings.Cut(strings.TrimSpace(line), " ")
			for _, p := range profileParts {
				for _, prefix := range p.prefixes {
					if strings.HasPrefix(sym, prefix) {
						counts[p.name]++
						break stack
					}
				}
			}
		}
	}
	shares := map[string]float64{}
	for name, n := range counts {
		shares[name] = 100 * float64(n) / float64(max(total, 1))
	}
	return shares, nil
}

// worktreeOf checks the commit rev out in a git worktree of its own in
// work, for its build: it returns the tree, the commit's short name and
// what removes the tree.
func worktreeOf(ctx context.Context, root, work, rev string) (tree, short string, remove func(), err error) {
	full, err := gitOut(ctx, root, "rev-parse", "--verify", "--quiet", rev+"^{commit}")
	if err != nil {
		return "", "", nil, fmt.Errorf("-against %s: not a commit of this repository: %w", rev, err)
	}
	short, _ = gitOut(ctx, root, "rev-parse", "--short", full)
	tree = filepath.Join(work, "against-src")
	if _, err := gitOut(ctx, root, "worktree", "add", "--detach", tree, full); err != nil {
		return "", "", nil, fmt.Errorf("git worktree add %s: %w", short, err)
	}
	return tree, short, func() { removeWorktree(root, tree) }, nil
}

// removeWorktree removes a worktree that the run added, not with the
// run's context: it goes even when the run was interrupted.
func removeWorktree(root, tree string) {
	_, _ = gitOut(context.Background(), root, "worktree", "remove", "--force", tree)
	_, _ = gitOut(context.Background(), root, "worktree", "prune")
}

// gitOut runs git in dir and returns its trimmed output.
func gitOut(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		return "", fmt.Errorf("git %s: %w\n%s", strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out)), nil
}
