package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

var caseOrder = []string{
	"gateway-local", "gateway-redis", "gateway-embedded", "gateway-miss", "gateway-miss-redis", "naive-miss",
	"nginx-static", "varnish-hit", "fiber-static", "naive",
}

// missCases are the cases whose every request is a store read: the two
// gateways, and naive-miss, the naive composition (serve-naive-longtail:
// one Redis GET, the query, one SET) on the same walk, the baseline that
// the bound on gateway-miss-redis is "about" (missTargetRows).
var missCases = []string{"gateway-miss", "gateway-miss-redis", "naive-miss"}

// missTargets are the bounds on the gateway's CPU per miss.
var missTargets = map[string]time.Duration{"gateway-miss": 20 * time.Microsecond, "gateway-miss-redis": 60 * time.Microsecond}

// scripts: report.lua prints the numbers as one JSON line at the end;
// random.lua asks for a random listing of the first n; sequential.lua
// walks them in order.
const reportLua = `
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("JSON {\"requests\":%d,\"duration_us\":%d,\"bytes\":%d,\"errors\":%d,\"non2xx\":%d,\"p50\":%d,\"p99\":%d,\"p999\":%d}\n",
    summary.requests, summary.duration, summary.bytes, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9)))
end
`

func randomLua(n int) string {
	return fmt.Sprintf(`
math.randomseed(os.time())
request = function() return wrk.format("GET", "/realty/" .. math.random(1, %d)) end
`, n) + reportLua
}

// walkLua walks listings from+1.., each of the threads another of every
// threads-th, wrapping after n: distinct listings while a run makes fewer
// than n requests. (setup runs in wrk's main interpreter: a thread knows
// only what it is given with set.)
func walkLua(from, n, threads int) string {
	return fmt.Sprintf(`
local index = 0
setup = function(thread) thread:set("first", %d + index); index = index + 1 end
init = function() step = %d; next_id = first - step end
request = function()
  next_id = next_id + step
  return wrk.format("GET", "/realty/" .. (next_id %% %d + 1))
end
`, from, threads, n) + reportLua
}

type result struct {
	requests             int64
	bytes                int64 // read by wrk: status lines, headers and bodies
	rps                  float64
	p50, p99, p999       time.Duration
	cpuPerRequest        time.Duration
	storeCPUShare        float64 // PostgreSQL's CPU (the run database's backends) over the gateway's
	redisCPUShare        float64 // Redis's over the gateway's
	pgPerRequest         time.Duration
	redisPerRequest      time.Duration
	peakRSSKiB           int64
	errors, non2xx       int64
	connections, threads int
	tiers                tiers // gateways only
}

type wrkReport struct {
	Requests   int64 `json:"requests"`
	DurationUS int64 `json:"duration_us"`
	Bytes      int64 `json:"bytes"`
	Errors     int64 `json:"errors"`
	Non2xx     int64 `json:"non2xx"`
	P50        int64 `json:"p50"`
	P99        int64 `json:"p99"`
	P999       int64 `json:"p999"`
}

// load drives one server with wrk and reads its CPU and memory around it.
func (l *lab) load(ctx context.Context, s *server, conns int, d time.Duration, pinned bool, script string) (result, error) {
	threads := 2
	if pinned || s.oneThread {
		threads = 1
	}
	if script == "" {
		script = reportLua
		switch s.script {
		case "random.lua":
			script = randomLua(l.opts.listings)
		case "walk.lua":
			script = walkLua(s.next, l.opts.listings, threads)
		}
	}
	if s.script == "walk.lua" && s.prefix != l.prefix { // its own Redis keys: empty
		if err := l.flushPrefix(ctx, s.prefix); err != nil {
			return result{}, err
		}
	}
	path := filepath.Join(l.work, s.name+".lua") // its own: two loads may run at once (-tokens)
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		return result{}, err
	}
	args := []string{}
	if pinned {
		args = append(args, "-c", "1", "wrk")
	}
	args = append(args, fmt.Sprintf("-t%d", threads), fmt.Sprintf("-c%d", max(conns, threads)), "-d"+d.String(), "-s", path)
	if s.auth {
		args = append(args, "-H", "Authorization: Bearer "+l.token)
	}
	for _, h := range s.headers {
		args = append(args, "-H", h)
	}
	args = append(args, "http://"+s.addr+s.path)
	bin := "wrk"
	if pinned {
		bin = "taskset"
	}
	pid := s.cmd.Process.Pid
	st0, err := cacheStats(s)
	if err != nil {
		return result{}, err
	}
	nv0 := readNaiveStats([]*server{s})
	u0 := l.usage(pid)
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	u1 := l.usage(pid)
	if err != nil {
		return result{}, fmt.Errorf("wrk %s: %w\n%s", s.name, err, out)
	}
	st1, err := cacheStats(s)
	if err != nil {
		return result{}, err
	}
	nv1 := readNaiveStats([]*server{s})
	w, err := parseWrk(s.name, out)
	if err != nil {
		return result{}, err
	}
	if s.script == "walk.lua" {
		s.next += int(w.Requests) + 2*conns // and those in flight at the end
	}
	r := result{
		requests: w.Requests, bytes: w.Bytes, rps: float64(w.Requests) / (float64(w.DurationUS) / 1e6),
		p50: time.Duration(w.P50) * time.Microsecond, p99: time.Duration(w.P99) * time.Microsecond,
		p999: time.Duration(w.P999) * time.Microsecond, errors: w.Errors, non2xx: w.Non2xx,
		peakRSSKiB: rssKiB(pid, "VmHWM"), connections: conns, threads: threads,
		tiers: tiersOf(st0, st1, s.redisless),
	}
	if s.naive {
		r.tiers.loads = nv1.Misses - nv0.Misses
	}
	r.setCPU(u0, u1)
	return r, nil
}

// setCPU fills the CPU figures of r from the readings around its run.
func (r *result) setCPU(u0, u1 usage) {
	server, pg, redis := u0.spent(u1)
	if r.requests > 0 {
		n := float64(r.requests)
		r.cpuPerRequest = time.Duration(server / n * 1e9)
		r.pgPerRequest = time.Duration(pg / n * 1e9)
		r.redisPerRequest = time.Duration(redis / n * 1e9)
	}
	if server > 0 {
		r.storeCPUShare, r.redisCPUShare = pg/server, redis/server
	}
}

// parseWrk reads the JSON line that report.lua prints.
func parseWrk(name string, out []byte) (wrkReport, error) {
	var w wrkReport
	i := bytes.Index(out, []byte("JSON "))
	if i < 0 {
		return w, fmt.Errorf("wrk %s printed no report:\n%s", name, out)
	}
	if err := json.Unmarshal(bytes.TrimSpace(bytes.SplitN(out[i+5:], []byte("\n"), 2)[0]), &w); err != nil {
		return w, fmt.Errorf("wrk %s report: %w", name, err)
	}
	return w, nil
}

// measure runs the parts asked for: every case, interleaved, the store
// misses with their profiles, the scaling curve, the memory case, the long
// tail and the pinned run; and returns the report.
func (l *lab) measure(ctx context.Context) (string, error) {
	var rep strings.Builder
	l.header(&rep)
	var main map[string][]result
	if l.opts.cases {
		if err := l.warmUp(ctx, caseOrder, false); err != nil {
			return rep.String(), err
		}
		var err error
		if main, err = l.rounds(ctx, l.opts.reps, false, caseOrder); err != nil {
			return rep.String(), err
		}
		fmt.Fprintf(&rep, "\n## Main run: wrk -t2 -c%d -d%v, %d interleaved repetitions, medians\n\n", l.opts.conns, l.opts.duration, l.opts.reps)
		table(&rep, main, caseOrder)
		ratios(&rep, main)
	}
	if l.opts.miss {
		res := main
		if res == nil {
			if err := l.warmUp(ctx, missCases, false); err != nil {
				return rep.String(), err
			}
			var err error
			if res, err = l.rounds(ctx, l.opts.reps, false, missCases); err != nil {
				return rep.String(), err
			}
		}
		if err := l.missSection(ctx, &rep, res); err != nil {
			return rep.String(), err
		}
	}
	if l.opts.cases && !l.opts.quick {
		if err := l.scaling(ctx, &rep); err != nil {
			return rep.String(), err
		}
	}
	if l.opts.memory {
		if err := l.memory(ctx, &rep); err != nil {
			return rep.String(), err
		}
	}
	if l.opts.longtail {
		if err := l.longtailBench(ctx, &rep); err != nil {
			return rep.String(), err
		}
	}
	if l.opts.codings {
		if err := l.codingsBench(ctx, &rep); err != nil {
			return rep.String(), err
		}
	}
	if l.opts.tokens {
		if err := l.tokensBench(ctx, &rep); err != nil {
			return rep.String(), err
		}
	}
	if l.opts.cases && !l.opts.skipPinned {
		log.Print("restarting the servers pinned to CPU 0, wrk on CPU 1")
		if err := l.restart(ctx, true); err != nil {
			return rep.String(), err
		}
		if err := l.warmUp(ctx, caseOrder, true); err != nil {
			return rep.String(), err
		}
		pinned, err := l.rounds(ctx, min(l.opts.reps, 3), true, caseOrder)
		if err != nil {
			return rep.String(), err
		}
		fmt.Fprintf(&rep, "\n## Pinned: servers on CPU 0 (GOMAXPROCS=1, one nginx worker, one Varnish pool), wrk -t1 -c%d on CPU 1, %d repetitions, medians\n\n",
			l.opts.conns, min(l.opts.reps, 3))
		table(&rep, pinned, caseOrder)
		ratios(&rep, pinned)
	}
	return rep.String(), nil
}

// warmUp runs each case for a second.
func (l *lab) warmUp(ctx context.Context, names []string, pinned bool) error {
	log.Print("warming up")
	for _, name := range names {
		if _, err := l.load(ctx, l.servers[name], l.opts.conns, time.Second, pinned, ""); err != nil {
			return err
		}
	}
	return nil
}

func (l *lab) header(w *strings.Builder) {
	model := "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	fmt.Fprintf(w, "# Gateway benchmark\n\n`go run ./deploy/bench %s` on %s; %d CPUs (%s); %s.\n",
		strings.Join(os.Args[1:], " "), time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), model, runtime.Version())
	if l.body != nil {
		fmt.Fprintf(w, "The hot listing is %d bytes. ", len(l.body))
	}
	w.WriteString("Every gateway request carries a valid JWT. All servers on 127.0.0.1, wrk on the same machine.\n")
}

func (l *lab) rounds(ctx context.Context, reps int, pinned bool, names []string) (map[string][]result, error) {
	out := map[string][]result{}
	for rep := range reps {
		log.Printf("repetition %d of %d%s", rep+1, reps, map[bool]string{true: " (pinned)"}[pinned])
		for _, name := range names {
			r, err := l.load(ctx, l.servers[name], l.opts.conns, l.opts.duration, pinned, "")
			if err != nil {
				return nil, err
			}
			out[name] = append(out[name], r)
		}
	}
	return out, nil
}

// median picks the repetition of median throughput, so its numbers belong
// together.
func median(rs []result) result {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b result) int { return cmp.Compare(a.rps, b.rps) })
	return s[len(s)/2]
}

func table(w *strings.Builder, res map[string][]result, names []string) {
	w.WriteString("| case | requests/s | p50 | p99 | p99.9 | server CPU per request | peak RSS | errors, non-2xx |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, name := range names {
		r := median(res[name])
		extra := ""
		switch name {
		case "gateway-miss":
			extra = fmt.Sprintf(" (PostgreSQL used %.1f× the gateway's CPU)", r.storeCPUShare)
		case "gateway-miss-redis", "naive-miss":
			extra = fmt.Sprintf(" (PostgreSQL used %.1f×, Redis %.1f× the server's CPU)", r.storeCPUShare, r.redisCPUShare)
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %s | %s%s | %d MiB | %d, %d |\n", name, r.rps, ms(r.p50), ms(r.p99), ms(r.p999),
			us(r.cpuPerRequest), extra, r.peakRSSKiB>>10, r.errors, r.non2xx)
	}
}

func ratios(w *strings.Builder, res map[string][]result) {
	rps := func(name string) float64 { return median(res[name]).rps }
	w.WriteString("\n| ratio | value | target |\n|---|---:|---|\n")
	for _, r := range []struct {
		a, b   string
		target float64
	}{
		{"gateway-local", "fiber-static", 0.9}, {"gateway-local", "nginx-static", 0.85}, {"gateway-local", "varnish-hit", 1.7},
		{"gateway-embedded", "fiber-static", 0.9}, {"gateway-embedded", "nginx-static", 0.85}, {"gateway-embedded", "varnish-hit", 1.7},
		{"gateway-redis", "naive", 1.3},
	} {
		v := rps(r.a) / rps(r.b)
		verdict := "met"
		if v < r.target-0.005 { // as printed
			verdict = "missed"
		}
		fmt.Fprintf(w, "| %s / %s | %.2f | ≥ %.2f: %s |\n", r.a, r.b, v, r.target, verdict)
	}
	missTargetRows(w, res)
}

// missTargetRows adds the bounds on the gateway's CPU per miss to a ratio
// table, and the production shape's CPU per miss against the naive
// composition's in the same runs: the issue sets its 60 µs as "about what
// the naive composition pays for a GET, a query and a SET", and this
// machine's speed varies from day to day by up to 2×.
func missTargetRows(w *strings.Builder, res map[string][]result) {
	for _, name := range missCases {
		target, ok := missTargets[name]
		if !ok || len(res[name]) == 0 {
			continue
		}
		v := median(res[name]).cpuPerRequest
		verdict := "met"
		if v.Round(100*time.Nanosecond) > target { // as printed
			verdict = "missed"
		}
		fmt.Fprintf(w, "| %s: the gateway's CPU per miss | %s | ≤ %s: %s |\n", name, us(v), us(target), verdict)
	}
	g, nv := res["gateway-miss-redis"], res["naive-miss"]
	if len(g) == 0 || len(nv) == 0 || median(nv).cpuPerRequest == 0 {
		return
	}
	gc, nc := median(g).cpuPerRequest, median(nv).cpuPerRequest
	fmt.Fprintf(w, "| gateway-miss-redis / naive-miss: CPU per miss | %.2f× (%s against %s) | none set; the 60 µs above is \"about\" naive-miss |\n",
		float64(gc)/float64(nc), us(gc), us(nc))
}

func (l *lab) scaling(ctx context.Context, w *strings.Builder) error {
	log.Print("scaling curve")
	w.WriteString("\n## Scaling: one run each\n\n| connections | gateway-local requests/s | gateway-local p99 | nginx-static requests/s | nginx-static p99 |\n|---:|---:|---:|---:|---:|\n")
	for _, c := range []int{16, 64, 256, 1024} {
		g, err := l.load(ctx, l.servers["gateway-local"], c, l.opts.duration, false, "")
		if err != nil {
			return err
		}
		n, err := l.load(ctx, l.servers["nginx-static"], c, l.opts.duration, false, "")
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "| %d | %.0f | %s | %.0f | %s |\n", c, g.rps, ms(g.p99), n.rps, ms(n.p99))
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
func us(d time.Duration) string { return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond)) }
