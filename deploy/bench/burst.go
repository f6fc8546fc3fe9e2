package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/faultproxy"
)

// The cold burst (-burst): what one cold listing costs the store when the
// whole fleet asks for it at once; the method is in METHODS.md, "The cold
// burst".

const (
	burstGateways = 4
	burstListings = 200
	burstDelay    = 20 * time.Millisecond
)

type burstVariant struct {
	name  string
	delay time.Duration
}

var burstVariants = []burstVariant{{"store as is", 0}, {fmt.Sprintf("store slowed %v per answer", burstDelay), burstDelay}}

// burstResult is one run of one build, summed over its gateways.
type burstResult struct {
	requests        int64
	rps             float64
	p99, p999, max  time.Duration // the largest of the gateways' wrk
	errors, non2xx  int64
	loads           uint64  // /stats storeLoads
	storeReads      float64 // gateway_store_requests_total, listing_by_id and listing_by_number
	coalesced       uint64  // /stats coalesced (none before the lease)
	tierErrors      uint64  // /stats tierErrors: failed Redis operations, the breaker's refusals included
	warmBefore      int     // by-id keys of the run's listings found in Redis before it (0: cold)
	first, listings int
}

func (r burstResult) perListing() float64 { return r.storeReads / float64(r.listings) }

// burstArm is one build with its gateways.
type burstArm struct {
	buildArm
	gateways []*server
	next     int // the first listing of the next run, less one
}

// burstBench runs the cold burst and returns its report.
func burstBench(ctx context.Context, opts options, root, work string) (string, error) {
	pg, err := url.Parse(envOr("GATEWAY_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"))
	if err != nil {
		return "", err
	}
	proxy, err := faultproxy.Listen(pg.Host)
	if err != nil {
		return "", err
	}
	defer proxy.Stop()
	arms, cleanup, err := burstArms(ctx, opts, root, work)
	defer cleanup()
	if err != nil {
		return "", err
	}
	for _, a := range arms {
		if err := a.startBurst(ctx, proxy.Addr()); err != nil {
			return "", fmt.Errorf("%s: %w", a.label, err)
		}
	}
	res, err := burstRounds(ctx, opts, arms, proxy)
	if err != nil {
		return "", err
	}
	var w strings.Builder
	arms[len(arms)-1].lab.header(&w)
	burstReport(&w, opts, arms, res)
	return w.String(), nil
}

// burstArms prepares this tree's build, and with -against the other
// commit's before it: each its own work directory and database, with the
// listings of every run.
func burstArms(ctx context.Context, opts options, root, work string) ([]*burstArm, func(), error) {
	armOpts := opts
	armOpts.db = ""
	armOpts.cases, armOpts.miss, armOpts.longtail, armOpts.memory = false, false, false, false
	armOpts.listings = burstListings * len(burstVariants) * (opts.reps + 1)
	head, _ := gitOut(ctx, root, "rev-parse", "--short", "HEAD")
	if dirty, _ := gitOut(ctx, root, "status", "--porcelain", "--untracked-files=no"); dirty != "" {
		head += " with uncommitted changes"
	}
	arms := []*burstArm{{buildArm: buildArm{label: "this tree (" + head + ")", lab: &lab{work: filepath.Join(work, "this"), root: root, opts: armOpts}}}}
	var removeTree func()
	if opts.againstSet {
		tree, short, remove, err := worktreeOf(ctx, root, work, opts.against)
		if err != nil {
			return nil, func() {}, err
		}
		removeTree = remove
		before := &burstArm{buildArm: buildArm{label: short, lab: &lab{work: filepath.Join(work, "against"), root: tree, opts: armOpts}}}
		arms = append([]*burstArm{before}, arms...)
	}
	cleanup := func() {
		for _, a := range arms {
			a.lab.stopAll()
		}
		if removeTree != nil {
			removeTree()
		}
	}
	for _, a := range arms {
		if err := os.Mkdir(a.lab.work, 0o755); err != nil {
			return arms, cleanup, err
		}
		if err := a.lab.prepare(ctx); err != nil { // builds, creates its database, seeds it
			return arms, cleanup, fmt.Errorf("%s: %w", a.label, err)
		}
	}
	return arms, cleanup, nil
}

// startBurst starts the build's gateways on one key prefix of their own,
// on PostgreSQL through the proxy at proxyAddr, logs in and waits until
// the change feed has settled and every gateway trusts Redis.
func (a *burstArm) startBurst(ctx context.Context, proxyAddr string) error {
	l := a.lab
	u, err := url.Parse(l.dbURL)
	if err != nil {
		return err
	}
	u.Host = proxyAddr
	env := []string{"GATEWAY_STORE_URL=" + u.String()}
	if l.opts.burstRedisTimeout > 0 {
		env = append(env, "GATEWAY_REDIS_TIMEOUT="+l.opts.burstRedisTimeout.String())
	}
	for i := range burstGateways {
		s, err := l.startGateway(ctx, fmt.Sprintf("burst-%d", i+1), false, l.prefix+"burst:", env...)
		if err != nil {
			return err
		}
		a.gateways = append(a.gateways, s)
	}
	if err := l.login(); err != nil {
		return err
	}
	return l.awaitFeedDrained(ctx, feedSettleWait)
}

// burstRounds runs the warm-up round and -reps rounds: in each, every
// variant, the builds back to back, their order flipped each round. It
// returns each variant's runs by build.
func burstRounds(ctx context.Context, opts options, arms []*burstArm, proxy *faultproxy.Proxy) (map[string][][]burstResult, error) {
	res := map[string][][]burstResult{}
	for _, v := range burstVariants {
		res[v.name] = make([][]burstResult, len(arms))
	}
	for rep := -1; rep < opts.reps; rep++ {
		if rep < 0 {
			log.Print("burst: warming up")
		} else {
			log.Printf("burst: repetition %d of %d", rep+1, opts.reps)
		}
		for _, v := range burstVariants {
			proxy.SetLatency(v.delay)
			order := make([]int, len(arms))
			for i := range order {
				order[i] = i
			}
			if rep%2 != 0 { // rep -1 too: the warm-up in the other order than the first round
				slices.Reverse(order)
			}
			for _, i := range order {
				r, err := arms[i].burstRun(ctx, opts, 1000*(rep+2))
				if err != nil {
					return nil, fmt.Errorf("%s, %s: %w", arms[i].label, v.name, err)
				}
				if rep >= 0 {
					res[v.name][i] = append(res[v.name][i], r)
				}
			}
		}
	}
	proxy.SetLatency(0)
	return res, nil
}

// burstLua asks for listings first..first+n-1 at random, seeded by the
// script's argument, and prints report.lua's line with the largest
// latency too.
func burstLua(first, n int) string {
	return fmt.Sprintf(`
init = function(args) math.randomseed(tonumber(args[1])) end
request = function() return wrk.format("GET", "/realty/" .. math.random(%d, %d)) end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("JSON {\"requests\":%%d,\"duration_us\":%%d,\"bytes\":%%d,\"errors\":%%d,\"non2xx\":%%d,\"p50\":%%d,\"p99\":%%d,\"p999\":%%d,\"max\":%%d}\n",
    summary.requests, summary.duration, summary.bytes, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), latency.max))
end
`, first, first+n-1)
}

// burstRun is one run on the build's next burstListings listings.
func (a *burstArm) burstRun(ctx context.Context, opts options, seed int) (burstResult, error) {
	l := a.lab
	r := burstResult{first: a.next + 1, listings: burstListings}
	a.next += burstListings
	if a.next > l.opts.listings {
		return r, fmt.Errorf("listings %d..%d are past the %d seeded", r.first, a.next, l.opts.listings)
	}
	var err error
	if r.warmBefore, err = l.keysPresent(ctx, a.gateways[0].prefix, r.first, burstListings); err != nil {
		return r, err
	}
	path := filepath.Join(l.work, "burst.lua")
	if err := os.WriteFile(path, []byte(burstLua(r.first, burstListings)), 0o644); err != nil {
		return r, err
	}
	c0, err := readBurstCounters(a.gateways)
	if err != nil {
		return r, err
	}
	outs := make([][]byte, len(a.gateways))
	errs := make([]error, len(a.gateways))
	var wg sync.WaitGroup
	for i, s := range a.gateways {
		wg.Go(func() {
			outs[i], errs[i] = exec.CommandContext(ctx, "wrk", "-t1", fmt.Sprintf("-c%d", opts.conns), "-d"+opts.duration.String(), "-s", path,
				"-H", "Authorization: Bearer "+l.token, "http://"+s.addr+"/", "--", fmt.Sprint(seed+i)).CombinedOutput()
		})
	}
	wg.Wait()
	c1, err := readBurstCounters(a.gateways)
	if err != nil {
		return r, err
	}
	logGateways(a.label, a.gateways)
	r.loads, r.coalesced, r.storeReads = c1.loads-c0.loads, c1.coalesced-c0.coalesced, c1.storeReads-c0.storeReads
	r.tierErrors = c1.tierErrors - c0.tierErrors
	for i, s := range a.gateways {
		if errs[i] != nil {
			return r, fmt.Errorf("wrk %s: %w\n%s", s.name, errs[i], outs[i])
		}
		if err := r.add(s.name, outs[i]); err != nil {
			return r, err
		}
	}
	return r, nil
}

// add sums one gateway's wrk report into r; the latencies are the largest.
func (r *burstResult) add(name string, out []byte) error {
	var w struct {
		wrkReport
		Max int64 `json:"max"`
	}
	i := bytes.Index(out, []byte("JSON "))
	if i < 0 {
		return fmt.Errorf("wrk %s printed no report:\n%s", name, out)
	}
	if err := json.Unmarshal(bytes.TrimSpace(bytes.SplitN(out[i+5:], []byte("\n"), 2)[0]), &w); err != nil {
		return fmt.Errorf("wrk %s report: %w", name, err)
	}
	r.requests += w.Requests
	r.rps += float64(w.Requests) / (float64(w.DurationUS) / 1e6)
	r.p99 = max(r.p99, time.Duration(w.P99)*time.Microsecond)
	r.p999 = max(r.p999, time.Duration(w.P999)*time.Microsecond)
	r.max = max(r.max, time.Duration(w.Max)*time.Microsecond)
	r.errors += w.Errors
	r.non2xx += w.Non2xx
	return nil
}

// keysPresent counts the by-id keys of listings first..first+n-1 under
// prefix that Redis holds.
func (l *lab) keysPresent(ctx context.Context, prefix string, first, n int) (int, error) {
	rdb := redis.NewClient(&redis.Options{Addr: l.redisAddr})
	defer rdb.Close()
	keys := make([]string, n)
	for i := range n {
		keys[i] = fmt.Sprintf("%srealty:id:%d", prefix, first+i)
	}
	got, err := rdb.Exists(ctx, keys...).Result()
	return int(got), err
}

type burstCounters struct {
	loads, coalesced, tierErrors uint64
	storeReads                   float64
}

// readBurstCounters sums the gateways' store reads: /stats and /metrics.
func readBurstCounters(gws []*server) (burstCounters, error) {
	st, err := cacheStats(gws...)
	if err != nil {
		return burstCounters{}, err
	}
	c := burstCounters{loads: st.StoreLoads, coalesced: st.Coalesced, tierErrors: st.TierErrors}
	for _, s := range gws {
		resp, err := http.Get("http://" + s.admin + "/metrics")
		if err != nil {
			return c, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return c, err
		}
		for line := range strings.Lines(string(body)) {
			if !strings.HasPrefix(line, "gateway_store_requests_total{") ||
				!strings.Contains(line, `op="listing_by_id"`) && !strings.Contains(line, `op="listing_by_number"`) {
				continue
			}
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
				c.storeReads += v
			}
		}
	}
	return c, nil
}

// burstReport writes each variant's table: per build, the store's reads
// per listing (the median run's, and every run's), the latencies of the
// median run, and the errors and non-2xx answers of all runs.
func burstReport(w *strings.Builder, opts options, arms []*burstArm, res map[string][][]burstResult) {
	fmt.Fprintf(w, "\n## Cold burst: %d gateways on one Redis and PostgreSQL, %d cold listings, wrk -t1 -c%d -d%v per gateway (%d clients), %d interleaved repetitions\n\n",
		burstGateways, burstListings, opts.conns, opts.duration, burstGateways*opts.conns, opts.reps)
	w.WriteString("Store reads: the growth of gateway_store_requests_total{op=\"listing_by_id\"|\"listing_by_number\"}, summed over the gateways " +
		"(/stats storeLoads in parentheses where it differs; a run's Redis errors in brackets); per listing: over the run's listings, every one of which was asked for. " +
		"Latencies, coalesced and Redis errors: the run of median reads per listing; the latencies are the largest of the four wrk processes'. " +
		"Coalesced: /stats coalesced, the reads another gateway's load answered (none before the lease). Redis errors: /stats tierErrors, " +
		"failed Redis operations and the Redis breaker's refusals (while it is open, no lease is taken: every flight reads the store).\n")
	if opts.burstRedisTimeout > 0 {
		fmt.Fprintf(w, "\nEvery gateway with GATEWAY_REDIS_TIMEOUT=%v.\n", opts.burstRedisTimeout)
	}
	for _, v := range burstVariants {
		fmt.Fprintf(w, "\n### %s\n\n| build | store reads per listing, median | each run | p99 | p99.9 | max | requests/s | coalesced | Redis errors | errors, non-2xx |\n"+
			"|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n", v.name)
		for i, a := range arms {
			rs := res[v.name][i]
			if len(rs) == 0 {
				continue
			}
			sorted := slices.Clone(rs)
			slices.SortFunc(sorted, func(x, y burstResult) int { return cmp.Compare(x.perListing(), y.perListing()) })
			m := sorted[len(sorted)/2]
			var each []string
			var errs, non2xx int64
			warm := 0
			for _, r := range rs {
				s := fmt.Sprintf("%.2f", r.perListing())
				if float64(r.loads) != r.storeReads {
					s += fmt.Sprintf(" (%d)", r.loads)
				}
				if r.tierErrors > 0 {
					s += fmt.Sprintf(" [%d Redis errors]", r.tierErrors)
				}
				each = append(each, s)
				errs, non2xx, warm = errs+r.errors, non2xx+r.non2xx, warm+r.warmBefore
			}
			fmt.Fprintf(w, "| %s | %.2f | %s | %s | %s | %s | %.0f | %d | %d | %d, %d |\n", a.label, m.perListing(), strings.Join(each, ", "),
				ms(m.p99), ms(m.p999), ms(m.max), m.rps, m.coalesced, m.tierErrors, errs, non2xx)
			if warm > 0 {
				fmt.Fprintf(w, "\n**%s: %d keys of the runs' listings were in Redis before their run: not a cold burst.**\n\n", a.label, warm)
			}
		}
	}
}

// logGateways logs each gateway's cache counters, as /stats has them.
func logGateways(label string, gws []*server) {
	for _, s := range gws {
		st, err := cacheStats(s)
		if err != nil {
			log.Printf("%s %s: %v", label, s.name, err)
			continue
		}
		log.Printf("%s %s: storeLoads %d misses %d shared %d coalesced %d tierHits %d localHits %d tierErrors %d redisTrusted %v",
			label, s.name, st.StoreLoads, st.Misses, st.Shared, st.Coalesced, st.TierHits, st.LocalHits, st.TierErrors, st.RedisTrusted)
	}
}
