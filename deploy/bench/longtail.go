package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The long tail (-longtail): -longtail-listings listings in PostgreSQL,
// Redis configured, two gateway replicas with the default settings, and
// requests that follow a Zipf distribution (s = -zipf-s) over the
// listings, hot ones scattered over the ids. The load generator is two
// wrk processes, one thread each, half the connections each, one per
// replica: the same split as a round-robin balancer's, at wrk's cost (a
// Go generator that alternated would spend more of the two cores than
// the servers). Against it, the naive composition (serve-naive-longtail)
// as two replicas on the same two streams: one Redis GET, and on a miss a
// PostgreSQL query and a SET. Both start from an empty Redis of their own
// prefix, warm up for one run, then run interleaved, each repetition on
// the same request sequences (the same seeds).

var longtailCases = []string{"gateway-longtail", "naive-longtail"}

// zipfLua asks for listings whose rank follows Zipf(s) over n; rank k is
// listing (k-1)*mult mod n + 1. Each thread draws from seed + its index.
func zipfLua(n int, s float64, mult int, seed int) string {
	return fmt.Sprintf(`
local index = 0
setup = function(thread) thread:set("seed", %d + index); index = index + 1 end
local n, s, mult = %d, %g, %d
local cdf = {}
init = function()
  math.randomseed(seed)
  local sum = 0
  for k = 1, n do sum = sum + k ^ (-s); cdf[k] = sum end
  for k = 1, n do cdf[k] = cdf[k] / sum end
end
request = function()
  local u = math.random()
  local lo, hi = 1, n
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if cdf[mid] < u then lo = mid + 1 else hi = mid end
  end
  return wrk.format("GET", "/realty/" .. (((lo - 1) * mult) %% n + 1))
end
`, seed, n, s, mult) + reportLua
}

// scatter is a multiplier coprime with n, so that ranks map to all ids.
func scatter(n int) int {
	gcd := func(a, b int) int {
		for b != 0 {
			a, b = b, a%b
		}
		return a
	}
	for m := 999_983; ; m += 2 {
		if gcd(m, n) == 1 {
			return m % max(n, 1)
		}
	}
}

type pairResult struct {
	result
	naive naiveStats // the naive composition's Redis hits and misses
}

func (l *lab) longtailBench(ctx context.Context, w *strings.Builder) error {
	n := l.opts.longtailListings
	gwPrefix, naivePrefix := l.prefix+"lt:", l.prefix+"ltn:"
	pairs := map[string][]*server{}
	for _, r := range []string{"a", "b"} {
		g, err := l.startGateway(ctx, "gateway-longtail-"+r, false, gwPrefix)
		if err != nil {
			return err
		}
		nv, err := l.startNaive(ctx, "naive-longtail-"+r, false, naivePrefix)
		if err != nil {
			return err
		}
		pairs["gateway-longtail"] = append(pairs["gateway-longtail"], g)
		pairs["naive-longtail"] = append(pairs["naive-longtail"], nv)
	}
	defer func() {
		for _, ss := range pairs {
			for _, s := range ss {
				l.stopServer(s)
			}
		}
	}()
	if l.token == "" {
		if err := l.login(); err != nil {
			return err
		}
	}
	for _, p := range []string{gwPrefix, naivePrefix} {
		if err := l.flushPrefix(ctx, p); err != nil {
			return err
		}
	}
	mult := scatter(n)
	log.Printf("long tail: warming up (Zipf s=%g over %d listings)", l.opts.zipfS, n)
	for _, name := range longtailCases {
		if _, err := l.loadPair(ctx, pairs[name], zipfLua(n, l.opts.zipfS, mult, 7)); err != nil {
			return err
		}
	}
	res := map[string][]pairResult{}
	for rep := range l.opts.reps {
		log.Printf("long tail: repetition %d of %d", rep+1, l.opts.reps)
		for _, name := range longtailCases {
			r, err := l.loadPair(ctx, pairs[name], zipfLua(n, l.opts.zipfS, mult, 1000*(rep+1)))
			if err != nil {
				return err
			}
			res[name] = append(res[name], r)
		}
	}
	st, err := cacheStats(pairs["gateway-longtail"]...)
	if err != nil {
		return err
	}
	l.longtailReport(w, res, st.RedisTrusted)
	return nil
}

// loadPair drives two replicas at once, one wrk process each, and sums
// what they did; p50 and p99 are the larger of the two.
func (l *lab) loadPair(ctx context.Context, pair []*server, script string) (pairResult, error) {
	path := filepath.Join(l.work, "zipf.lua")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		return pairResult{}, err
	}
	pids := []int{pair[0].cmd.Process.Pid, pair[1].cmd.Process.Pid}
	st0, err := cacheStats(pair...)
	if err != nil {
		return pairResult{}, err
	}
	nv0 := readNaiveStats(pair)
	u0 := l.usage(pids...)
	outs := make([][]byte, len(pair))
	errs := make([]error, len(pair))
	var wg sync.WaitGroup
	for i, s := range pair {
		wg.Go(func() {
			outs[i], errs[i] = exec.CommandContext(ctx, "wrk", "-t1", fmt.Sprintf("-c%d", max(l.opts.conns/2, 1)), "-d"+l.opts.duration.String(),
				"-s", path, "-H", "Authorization: Bearer "+l.token, "http://"+s.addr+s.path).CombinedOutput()
		})
	}
	wg.Wait()
	u1 := l.usage(pids...)
	var r pairResult
	r.connections, r.threads = max(l.opts.conns/2, 1)*2, 2
	for i, s := range pair {
		if errs[i] != nil {
			return r, fmt.Errorf("wrk %s: %w\n%s", s.name, errs[i], outs[i])
		}
		wr, err := parseWrk(s.name, outs[i])
		if err != nil {
			return r, err
		}
		r.requests += wr.Requests
		r.rps += float64(wr.Requests) / (float64(wr.DurationUS) / 1e6)
		r.p50 = max(r.p50, time.Duration(wr.P50)*time.Microsecond)
		r.p99 = max(r.p99, time.Duration(wr.P99)*time.Microsecond)
		r.p999 = max(r.p999, time.Duration(wr.P999)*time.Microsecond)
		r.errors += wr.Errors
		r.non2xx += wr.Non2xx
		r.peakRSSKiB += rssKiB(s.cmd.Process.Pid, "VmHWM")
	}
	st1, err := cacheStats(pair...)
	if err != nil {
		return r, err
	}
	r.tiers = tiersOf(st0, st1, false)
	nv1 := readNaiveStats(pair)
	r.naive = naiveStats{Hits: nv1.Hits - nv0.Hits, Misses: nv1.Misses - nv0.Misses}
	r.setCPU(u0, u1)
	return r, nil
}

// readNaiveStats sums the naive replicas' counters; gateways count none.
func readNaiveStats(pair []*server) naiveStats {
	var sum naiveStats
	for _, s := range pair {
		if !s.naive {
			continue
		}
		resp, err := http.Get("http://" + s.addr + "/_stats")
		if err != nil {
			continue
		}
		var st naiveStats
		_ = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		sum.Hits += st.Hits
		sum.Misses += st.Misses
	}
	return sum
}

func (l *lab) longtailReport(w *strings.Builder, res map[string][]pairResult, trusted bool) {
	fmt.Fprintf(w, "\n## Long tail: Zipf s=%g over %d listings, two replicas each, two wrk -t1 -c%d -d%v (one per replica), %d interleaved repetitions, medians\n\n",
		l.opts.zipfS, l.opts.longtailListings, max(l.opts.conns/2, 1), l.opts.duration, l.opts.reps)
	w.WriteString("| case | requests/s | p50 | p99 | p99.9 | server CPU per request | PostgreSQL CPU per request | local tier | Redis | store | peak RSS (both) | errors, non-2xx |\n" +
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	med := map[string]pairResult{}
	for _, name := range longtailCases {
		rs := res[name]
		m := rs[0]
		for _, r := range rs { // the repetition of median throughput
			if r.rps == median(resultsOf(rs)).rps {
				m = r
			}
		}
		med[name] = m
		local, redis, store := m.tiers.shares()
		if name == "naive-longtail" {
			if total := float64(m.naive.Hits + m.naive.Misses); total > 0 {
				local, redis, store = 0, float64(m.naive.Hits)/total, float64(m.naive.Misses)/total
			}
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %d MiB | %d, %d |\n", name, m.rps, ms(m.p50), ms(m.p99), ms(m.p999),
			us(m.cpuPerRequest), us(m.pgPerRequest), pct(local), pct(redis), pct(store), m.peakRSSKiB>>10, m.errors, m.non2xx)
	}
	g, nv := med["gateway-longtail"], med["naive-longtail"]
	fmt.Fprintf(w, "\n| ratio | value | target |\n|---|---:|---|\n| gateway-longtail / naive-longtail | %.2f | none set (the issue asks for the comparison) |\n", g.rps/nv.rps)
	w.WriteString("\nShares per repetition (gateway: local / Redis / store, from the replicas' /stats; naive: Redis hits / misses):")
	for i := range res["gateway-longtail"] {
		gl, gr, gs := res["gateway-longtail"][i].tiers.shares()
		n := res["naive-longtail"][i].naive
		fmt.Fprintf(w, " %d: %s / %s / %s, %s / %s;", i+1, pct(gl), pct(gr), pct(gs), pct(frac(n.Hits, n.Hits+n.Misses)), pct(frac(n.Misses, n.Hits+n.Misses)))
	}
	fmt.Fprintf(w, " Redis trusted by the gateways at the end: %v. p50 and p99 are the larger of the two wrk processes'.\n", trusted)
}

func resultsOf(rs []pairResult) []result {
	out := make([]result, len(rs))
	for i, r := range rs {
		out[i] = r.result
	}
	return out
}

func frac(a, b uint64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

func pct(f float64) string { return fmt.Sprintf("%.1f %%", 100*f) }
