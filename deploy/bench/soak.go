package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/jackc/pgx/v5"
	"github.com/klauspost/compress/zstd"

	"github.com/realty-gateway/gateway/internal/gatewaytest"
)

// The soak (-soak): two gateways under CPU hogs, reads and writes, and
// every old read counted; the method is in METHODS.md, "The soak".

const (
	soakPutListings = 20  // listings 101..120, written with PUT
	soakSQLListings = 10  // listings 201..210, written in SQL
	soakPutFirst    = 101 // the first of the PUT listings
	soakSQLFirst    = 201 // the first of the SQL listings
	soakConverge    = 30 * time.Second
)

// soakListing is one written listing.
type soakListing struct {
	id  int
	sql bool
	mu  sync.Mutex // one write at a time
	// next is the version the next write writes (under mu); floor the
	// last version whose write returned (a PUT's 200, a SQL commit).
	next  int64
	floor atomic.Int64
	// last: the PUT that set floor, for the report.
	last atomic.Pointer[soakPut]
	// title: a SQL listing's title in its document now (under mu).
	title string
	// commits[v] is when version v of a SQL listing committed.
	commitMu sync.RWMutex
	commits  []time.Time
}

func (sl *soakListing) commitTime(v int64) time.Time {
	sl.commitMu.RLock()
	defer sl.commitMu.RUnlock()
	if v < 0 || int(v) >= len(sl.commits) {
		return time.Time{}
	}
	return sl.commits[v]
}

// soakPut is a PUT that returned: its version, the gateway it went
// through and when it returned.
type soakPut struct {
	v        int64
	via      int
	returned time.Time
}

// soakView is one gateway's one key of a written listing: seen is the
// newest version that a read of it returned.
type soakView struct {
	seen atomic.Int64
}

// soakCounters are the run's running totals, read by the sampler each
// second.
type soakCounters struct {
	reads, readErrors, readNon200, unreadable atomic.Int64
	oldFloor, wentBack, sqlLate, putWentBack  atomic.Int64
	puts, putFailed, putSkipped               atomic.Int64
	sqlWrites, sqlFailed                      atomic.Int64
}

func (c *soakCounters) old() int64 { return c.oldFloor.Load() + c.wentBack.Load() + c.sqlLate.Load() }

// soakSample is one second's scrape of both gateways.
type soakSample struct {
	at       time.Duration // since the start
	tierOn   [2]int        // -1: not scraped
	consumer [2]int
	requests [2]float64 // gateway_http_requests_total, summed
	// redisErrors: gateway_cache_redis_errors_total; breaker:
	// gateway_breaker_state{breaker="redis"} (0 closed); trusted:
	// gateway_cache_redis_trusted (-1: not scraped).
	redisErrors [2]float64
	breaker     [2]int
	trusted     [2]int
	reads       int64
	old         int64
	puts        int64
	sqls        int64
}

type soakRun struct {
	l        *lab
	opts     options
	gws      [2]*server
	token    string
	put, sql []*soakListing
	views    map[string]*soakView // "g|path"
	c        soakCounters
	start    time.Time

	mu         sync.Mutex
	examples   []string        // the first old reads
	behind     []time.Duration // SQL reads of an older version than committed: how long the newer had been committed
	putLatency []time.Duration
	non200     map[int]int64
	samples    []soakSample
}

var soakNames = [2]string{"A", "B"}

// soakBench runs the soak and returns its report.
func soakBench(ctx context.Context, opts options, root, work string) (string, error) {
	lopts := opts
	lopts.cases, lopts.miss, lopts.longtail, lopts.memory, lopts.codings, lopts.tokens = false, false, false, false, false, false
	if !listingsSet() {
		lopts.listings = 10_000
	}
	lopts.listings = max(lopts.listings, soakSQLFirst+soakSQLListings)
	l := &lab{work: work, root: root, opts: lopts}
	defer l.stopAll()
	if err := l.prepare(ctx); err != nil { // builds, creates the database, seeds it
		return "", err
	}
	r := &soakRun{l: l, opts: lopts, views: map[string]*soakView{}, non200: map[int]int64{}}
	extra := slices.Clone(opts.soakEnv)
	if opts.soakDuration > 45*time.Minute { // the token is good for an hour by default
		extra = append(extra, "GATEWAY_TOKEN_TTL="+(opts.soakDuration+15*time.Minute).String())
	}
	for i := range r.gws {
		s, err := l.startGateway(ctx, "soak-"+strings.ToLower(soakNames[i]), false, "", extra...)
		if err != nil {
			return "", err
		}
		r.gws[i] = s
		if i == 0 {
			time.Sleep(time.Second) // the first takes the feed
		}
	}
	if err := l.login(); err != nil {
		return "", err
	}
	r.token = l.token
	if err := l.awaitFeedDrained(ctx, feedSettleWait); err != nil {
		return "", err
	}
	if err := r.awaitLocalTiers(ctx); err != nil {
		return "", err
	}
	if err := r.setUp(ctx); err != nil {
		return "", err
	}
	report, failed, err := r.run(ctx)
	if err != nil {
		return report, err
	}
	if failed != "" {
		if opts.out != "" {
			_ = os.WriteFile(opts.out, []byte(report), 0o644)
		}
		return report, errors.New(failed)
	}
	return report, nil
}

// listingsSet reports whether -listings was given.
func listingsSet() bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "listings" })
	return set
}

// awaitLocalTiers waits, at most 30 s, until both gateways' local tiers
// serve.
func (r *soakRun) awaitLocalTiers(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		on := 0
		for _, s := range r.gws {
			if st, err := (&gatewaytest.Process{AdminBase: "http://" + s.admin}).ReadStats(); err == nil && st.Cache.LocalTierOn {
				on++
			}
		}
		if on == len(r.gws) {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the local tier of a gateway is not on 30 s after the feed settled")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// setUp makes the written listings and their views, and reads the SQL
// listings' titles.
func (r *soakRun) setUp(ctx context.Context) error {
	for i := range soakPutListings {
		r.put = append(r.put, &soakListing{id: soakPutFirst + i, next: 1})
	}
	db, err := pgx.Connect(ctx, r.l.dbURL)
	if err != nil {
		return err
	}
	defer db.Close(context.Background())
	for i := range soakSQLListings {
		sl := &soakListing{id: soakSQLFirst + i, sql: true, next: 1, commits: []time.Time{{}}}
		var doc string
		if err := db.QueryRow(ctx, `SELECT document FROM listings WHERE id = $1`, sl.id).Scan(&doc); err != nil {
			return err
		}
		sl.title = fmt.Sprintf(`"title":"Sea-view flat %d"`, sl.id)
		if !strings.Contains(doc, sl.title) {
			return fmt.Errorf("listing %d's document lacks %s: %.200s", sl.id, sl.title, doc)
		}
		r.sql = append(r.sql, sl)
	}
	for g := range r.gws {
		for _, sl := range r.all() {
			for _, p := range soakPaths(sl) {
				r.views[soakViewKey(g, p)] = &soakView{}
			}
		}
	}
	return nil
}

func (r *soakRun) all() []*soakListing { return append(slices.Clone(r.put), r.sql...) }

// soakPaths are a listing's two keys: by id and by number (the seed's
// number is the id, of firm 1).
func soakPaths(sl *soakListing) [2]string {
	return [2]string{fmt.Sprintf("/realty/%d", sl.id), fmt.Sprintf("/realty/1-%d", sl.id)}
}

func soakViewKey(g int, path string) string { return strconv.Itoa(g) + "|" + path }

// soakLua asks for a listing of the first n at random, seeded by the
// script's argument, and prints report.lua's line.
func soakLua(n int) string {
	return fmt.Sprintf(`
init = function(args) math.randomseed(tonumber(args[1])) end
request = function() return wrk.format("GET", "/realty/" .. math.random(1, %d)) end
`, n) + reportLua
}

// run runs the load, the writers, the readers and the sampler for the
// duration, then the final reads, and returns the report and why the run
// failed ("" where it did not).
func (r *soakRun) run(ctx context.Context) (string, string, error) {
	l, d := r.l, r.opts.soakDuration
	script := filepath.Join(l.work, "soak.lua")
	if err := os.WriteFile(script, []byte(soakLua(r.opts.listings)), 0o644); err != nil {
		return "", "", err
	}
	var before [2]gatewaytest.Stats
	var cpu0 [2]float64
	for i, s := range r.gws {
		st, err := (&gatewaytest.Process{AdminBase: "http://" + s.admin}).ReadStats()
		if err != nil {
			return "", "", err
		}
		before[i], cpu0[i] = st, cpuSeconds(s.cmd.Process.Pid)
	}
	hogs, err := startHogs(r.opts.soakHogs)
	defer stopHogs(hogs)
	if err != nil {
		return "", "", err
	}
	hogCPU0 := cpuSecondsOf(hogs)
	machine0 := machineCPU()
	log.Printf("soak: %v, %d CPU hogs, wrk -t1 -c%d on each gateway, %d PUTs/s per gateway, %g SQL updates/s, %d checked readers per gateway",
		d, len(hogs), r.opts.soakConns, r.opts.soakWriteRate, r.opts.soakSQLRate, r.opts.soakReaders)

	r.start = time.Now()
	lctx, stop := context.WithDeadline(ctx, r.start.Add(d))
	defer stop()
	var wg sync.WaitGroup
	outs, errs := [2][]byte{}, [2]error{}
	for i, s := range r.gws {
		wg.Go(func() {
			outs[i], errs[i] = exec.CommandContext(ctx, "wrk", "-t1", fmt.Sprintf("-c%d", r.opts.soakConns), fmt.Sprintf("-d%ds", int(d.Seconds())),
				"-s", script, "-H", "Authorization: Bearer "+r.token, "http://"+s.addr+"/", "--", fmt.Sprint(i+1)).CombinedOutput()
		})
	}
	var others sync.WaitGroup
	if r.opts.soakWriteRate > 0 {
		for g := range r.gws {
			others.Go(func() { r.putWriter(lctx, g) })
		}
	}
	var sqlErr error
	if r.opts.soakSQLRate > 0 {
		others.Go(func() { sqlErr = r.sqlWriter(lctx) })
	}
	for g := range r.gws {
		for k := range r.opts.soakReaders {
			others.Go(func() { r.reader(lctx, g, uint64(g*100+k)) })
		}
	}
	others.Go(func() { r.sampler(lctx) })
	others.Wait()
	wg.Wait()
	elapsed := time.Since(r.start)
	hogCPU := cpuSecondsOf(hogs) - hogCPU0
	machine := machineCPU().since(machine0)
	nhogs := len(hogs)
	stopHogs(hogs)
	hogs = nil
	var cpu [2]float64
	for i, s := range r.gws {
		cpu[i] = cpuSeconds(s.cmd.Process.Pid) - cpu0[i]
	}
	var wrks [2]wrkReport
	for i, s := range r.gws {
		if errs[i] != nil {
			return "", "", fmt.Errorf("wrk %s: %w\n%s", s.name, errs[i], outs[i])
		}
		w, err := parseWrk(s.name, outs[i])
		if err != nil {
			return "", "", err
		}
		wrks[i] = w
	}
	if sqlErr != nil {
		return "", "", sqlErr
	}
	log.Print("soak: the load ended; final reads")
	converged, total, slowest := r.finalReads(ctx)
	var after [2]gatewaytest.Stats
	for i, s := range r.gws {
		st, err := (&gatewaytest.Process{AdminBase: "http://" + s.admin}).ReadStats()
		if err != nil {
			return "", "", err
		}
		after[i] = st
	}
	var w strings.Builder
	l.header(&w)
	failed := r.report(&w, soakFigures{elapsed: elapsed, wrks: wrks, before: before, after: after, cpu: cpu, hogs: nhogs,
		hogCPU: hogCPU, machine: machine, converged: converged, total: total, slowest: slowest})
	return w.String(), failed, nil
}

// startHogs starts n busy processes (`yes` into /dev/null), each in its
// own process group.
func startHogs(n int) ([]int, error) {
	var pids []int
	for range n {
		cmd := exec.Command("yes")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // stdout: /dev/null
		if err := cmd.Start(); err != nil {
			return pids, fmt.Errorf("start a CPU hog: %w", err)
		}
		pids = append(pids, cmd.Process.Pid)
		go func() { _ = cmd.Wait() }()
	}
	return pids, nil
}

// stopHogs ends the hogs that startHogs started, by their ids.
func stopHogs(pids []int) {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// putWriter writes through gateway g, -soak-write-rate PUTs a second, the
// PUT listings in turn (gateway B starts half way round, so every listing
// is written through both). Each PUT runs on its own goroutine, so that a
// slow one holds up only its listing: a listing being written is passed
// over for the next free one, and where none is free the tick is skipped.
func (r *soakRun) putWriter(ctx context.Context, g int) {
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	t := time.NewTicker(time.Second / time.Duration(r.opts.soakWriteRate))
	defer t.Stop()
	var writes sync.WaitGroup
	defer writes.Wait()
	for k := g * len(r.put) / 2; ; k++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var sl *soakListing
		for range r.put {
			if c := r.put[k%len(r.put)]; c.mu.TryLock() {
				sl = c
				break
			}
			k++
		}
		if sl == nil {
			r.c.putSkipped.Add(1)
			continue
		}
		path := soakPaths(sl)[k/len(r.put)%2]
		writes.Go(func() {
			defer sl.mu.Unlock()
			r.putOne(ctx, client, g, sl, path)
		})
	}
}

// putOne writes sl's next version through gateway g at path; the caller
// holds sl.mu.
func (r *soakRun) putOne(ctx context.Context, client *http.Client, g int, sl *soakListing, path string) {
	v := sl.next
	sl.next++ // a failed PUT's version is never written again: it may have committed
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+r.gws[g].addr+path,
		strings.NewReader(fmt.Sprintf(`{"title":"soak-v%d","categoryId":1,"location":{"cityId":34}}`, v)))
	req.Header.Set("Authorization", "Bearer "+r.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "bench")
	began := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			r.c.putFailed.Add(1)
			r.example(fmt.Sprintf("PUT %s through %s: %v", path, soakNames[g], err))
		}
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		r.c.putFailed.Add(1)
		r.mu.Lock()
		r.non200[resp.StatusCode]++
		r.mu.Unlock()
		return
	}
	sl.last.Store(&soakPut{v: v, via: g, returned: time.Now()})
	sl.floor.Store(v)
	r.c.puts.Add(1)
	r.mu.Lock()
	r.putLatency = append(r.putLatency, time.Since(began))
	r.mu.Unlock()
}

// sqlWriter updates the SQL listings' titles in SQL, -soak-sql-rate a
// second, in turn, each update in its own transaction, as another writer
// than the gateway would.
func (r *soakRun) sqlWriter(ctx context.Context) error {
	db, err := pgx.Connect(ctx, r.l.dbURL)
	if err != nil {
		return err
	}
	defer db.Close(context.Background())
	t := time.NewTicker(time.Duration(float64(time.Second) / r.opts.soakSQLRate))
	defer t.Stop()
	for k := 0; ; k++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		sl := r.sql[k%len(r.sql)]
		sl.mu.Lock()
		v := sl.next
		title := fmt.Sprintf(`"title":"sql-v%d"`, v)
		tag, err := db.Exec(ctx, `UPDATE listings SET document = replace(document, $1, $2) WHERE id = $3 AND strpos(document, $1) > 0`,
			sl.title, title, sl.id)
		switch {
		case err == nil && tag.RowsAffected() == 1:
			at := time.Now()
			sl.next++
			sl.title = title
			sl.commitMu.Lock()
			sl.commits = append(sl.commits, at)
			sl.commitMu.Unlock()
			sl.floor.Store(v)
			r.c.sqlWrites.Add(1)
		case ctx.Err() != nil:
		case err == nil:
			sl.mu.Unlock()
			return fmt.Errorf("SQL update of listing %d matched %d rows: its title is not %s", sl.id, tag.RowsAffected(), sl.title)
		default:
			// Whether it committed is unknown: its listing is written no more.
			r.c.sqlFailed.Add(1)
			log.Printf("soak: SQL update of listing %d: %v", sl.id, err)
			sl.mu.Unlock()
			return fmt.Errorf("SQL update of listing %d: %w", sl.id, err)
		}
		sl.mu.Unlock()
	}
}

// reader reads the written listings from gateway g until ctx ends, each
// read a listing and key at random, in another coding, and checks it.
func (r *soakRun) reader(ctx context.Context, g int, seed uint64) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 2}}
	defer client.CloseIdleConnections()
	rng := rand.New(rand.NewPCG(seed, 0x50a4))
	all := r.all()
	codings := []string{"", "gzip", "br", "zstd"}
	for i := 0; ctx.Err() == nil; i++ {
		sl := all[rng.IntN(len(all))]
		path := soakPaths(sl)[rng.IntN(2)]
		view := r.views[soakViewKey(g, path)]
		// What this read must not be older than, loaded before it is sent.
		floor, seenBefore, sent := sl.floor.Load(), view.seen.Load(), time.Now()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.gws[g].addr+path, nil)
		req.Header.Set("Authorization", "Bearer "+r.token)
		if ae := codings[i%len(codings)]; ae != "" {
			req.Header.Set("Accept-Encoding", ae)
		}
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				r.c.readErrors.Add(1)
			}
			continue
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			if ctx.Err() == nil {
				r.c.readErrors.Add(1)
			}
			continue
		}
		r.c.reads.Add(1)
		if resp.StatusCode != http.StatusOK {
			r.c.readNon200.Add(1)
			r.mu.Lock()
			r.non200[resp.StatusCode]++
			r.mu.Unlock()
			continue
		}
		seen, ok := soakVersion(resp.Header.Get("Content-Encoding"), raw)
		if !ok {
			r.c.unreadable.Add(1)
			r.example(fmt.Sprintf("%s %s (%s): unreadable body %.120q", soakNames[g], path, resp.Header.Get("Content-Encoding"), raw))
			continue
		}
		for { // the newest version this view has returned
			cur := view.seen.Load()
			if seen <= cur || view.seen.CompareAndSwap(cur, seen) {
				break
			}
		}
		at := time.Since(r.start).Round(time.Millisecond)
		switch {
		case !sl.sql && seen < floor:
			r.c.oldFloor.Add(1)
			how := ""
			if p := sl.last.Load(); p != nil && p.v == floor {
				how = fmt.Sprintf(" through %s, %v before the read was sent", soakNames[p.via], sent.Sub(p.returned).Round(time.Millisecond))
			}
			r.example(fmt.Sprintf("at %v: %s %s (%s) read v%d after v%d's PUT returned%s", at, soakNames[g], path, codingName(resp), seen, floor, how))
		case seen < seenBefore && !sl.sql:
			// Not below the floor: the newer version's PUT had not returned.
			r.c.putWentBack.Add(1)
		case seen < seenBefore:
			r.c.wentBack.Add(1)
			r.example(fmt.Sprintf("at %v: %s %s (%s) read v%d after an earlier read of it returned v%d", at, soakNames[g], path, codingName(resp), seen, seenBefore))
		case sl.sql && seen < floor:
			newer := sent.Sub(sl.commitTime(seen + 1))
			r.mu.Lock()
			r.behind = append(r.behind, newer)
			r.mu.Unlock()
			if newer > r.opts.soakSQLBound {
				r.c.sqlLate.Add(1)
				r.example(fmt.Sprintf("at %v: %s %s (%s) read v%d, %v after v%d committed in SQL", at, soakNames[g], path, codingName(resp),
					seen, newer.Round(time.Millisecond), seen+1))
			}
		}
	}
}

func codingName(resp *http.Response) string {
	if ce := resp.Header.Get("Content-Encoding"); ce != "" {
		return ce
	}
	return "identity"
}

// example keeps the first old reads for the report.
func (r *soakRun) example(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.examples) < 10 {
		r.examples = append(r.examples, s)
		log.Printf("soak: %s", s)
	}
}

// soakVersion decodes a body and returns the version in its title:
// soak-vN (a PUT), sql-vN (a SQL update), 0 for the seed's title.
func soakVersion(ce string, body []byte) (int64, bool) {
	var rd io.Reader = bytes.NewReader(body)
	switch ce {
	case "":
	case "gzip":
		zr, err := gzip.NewReader(rd)
		if err != nil {
			return 0, false
		}
		rd = zr
	case "br":
		rd = brotli.NewReader(rd)
	case "zstd":
		zr, err := zstd.NewReader(rd)
		if err != nil {
			return 0, false
		}
		defer zr.Close()
		rd = zr
	default:
		return 0, false
	}
	var doc struct{ Title string }
	if err := json.NewDecoder(rd).Decode(&doc); err != nil {
		return 0, false
	}
	if strings.HasPrefix(doc.Title, "Sea-view flat ") {
		return 0, true
	}
	for _, p := range []string{"soak-v", "sql-v"} {
		if v, ok := strings.CutPrefix(doc.Title, p); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// sampler scrapes both gateways' /metrics once a second until ctx ends.
func (r *soakRun) sampler(ctx context.Context) {
	client := &http.Client{Timeout: 900 * time.Millisecond}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for first := true; ; first = false {
		if !first { // the first at once: the baseline
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		s := soakSample{at: time.Since(r.start), tierOn: [2]int{-1, -1}, consumer: [2]int{-1, -1}, breaker: [2]int{-1, -1}, trusted: [2]int{-1, -1},
			reads: r.c.reads.Load(), old: r.c.old(), puts: r.c.puts.Load(), sqls: r.c.sqlWrites.Load()}
		var wg sync.WaitGroup
		for g, gw := range r.gws {
			wg.Go(func() {
				m, err := scrapeMetrics(client, gw)
				if err != nil {
					return // tierOn and consumer stay -1: not scraped
				}
				if v, ok := m["gateway_cache_local_tier_on"]; ok {
					s.tierOn[g] = int(v)
				}
				if v, ok := m["gateway_feed_consumer"]; ok {
					s.consumer[g] = int(v)
				}
				s.requests[g] = m["gateway_http_requests_total"]
				s.redisErrors[g] = m["gateway_cache_redis_errors_total"]
				if v, ok := m[`gateway_breaker_state{breaker="redis"}`]; ok {
					s.breaker[g] = int(v)
				}
				if v, ok := m["gateway_cache_redis_trusted"]; ok {
					s.trusted[g] = int(v)
				}
			})
		}
		wg.Wait()
		r.mu.Lock()
		r.samples = append(r.samples, s)
		r.mu.Unlock()
	}
}

// scrapeMetrics reads a gateway's /metrics: each metric's value, summed
// over its labels, under its name; and each line's under its name and
// labels.
func scrapeMetrics(client *http.Client, s *server) (map[string]float64, error) {
	resp, err := client.Get("http://" + s.admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %d", resp.StatusCode)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		name := line[:sp]
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		if b := strings.IndexByte(name, '{'); b >= 0 {
			m[name] = v
			name = name[:b]
		}
		m[name] += v
	}
	return m, sc.Err()
}

// finalReads reads every written listing's keys from both gateways until
// each shows its last version (a PUT listing: at least its floor, since a
// failed PUT may have committed), at most soakConverge; it returns how
// many did, of how many, and the longest wait.
func (r *soakRun) finalReads(ctx context.Context) (int, int, time.Duration) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	began := time.Now()
	converged, total := 0, 0
	var slowest time.Duration
	for _, sl := range r.all() {
		want := sl.floor.Load()
		for g, gw := range r.gws {
			for _, path := range soakPaths(sl) {
				total++
				var seen int64 = -1
				for {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+gw.addr+path, nil)
					req.Header.Set("Authorization", "Bearer "+r.token)
					if resp, err := client.Do(req); err == nil {
						raw, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode == http.StatusOK {
							seen, _ = soakVersion(resp.Header.Get("Content-Encoding"), raw)
						}
					}
					if seen >= want && (!sl.sql || seen == want) {
						converged++
						slowest = max(slowest, time.Since(began))
						break
					}
					if time.Since(began) > soakConverge || ctx.Err() != nil {
						r.example(fmt.Sprintf("after the load: %s %s reads v%d, its last version is v%d", soakNames[g], path, seen, want))
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		}
	}
	return converged, total, slowest
}

// machineTimes is /proc/stat's cpu line: busy and total jiffies.
type machineTimes struct{ busy, total float64 }

func machineCPU() machineTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var m machineTimes
	for i, v := range f[1:] {
		n, _ := strconv.ParseFloat(v, 64)
		if i >= 8 { // guest time is inside user time
			break
		}
		m.total += n
		if i != 3 && i != 4 { // idle, iowait
			m.busy += n
		}
	}
	return m
}

// since is the share of the machine's CPU time that was busy since m0.
func (m machineTimes) since(m0 machineTimes) float64 {
	if m.total <= m0.total {
		return 0
	}
	return (m.busy - m0.busy) / (m.total - m0.total)
}

// soakFigures are the run's figures besides soakRun's own.
type soakFigures struct {
	elapsed       time.Duration
	wrks          [2]wrkReport
	before, after [2]gatewaytest.Stats
	cpu           [2]float64 // the gateways' CPU seconds
	hogs          int
	hogCPU        float64
	machine       float64 // busy share of the machine
	converged     int
	total         int
	slowest       time.Duration
}

// report writes the report and returns why the run failed, or "".
func (r *soakRun) report(w *strings.Builder, f soakFigures) string {
	o := r.opts
	c := &r.c
	fmt.Fprintf(w, "\n## Soak: two gateways under %d CPU hogs and wrk for %v, writes through both and in SQL\n\n", f.hogs, o.soakDuration)
	fmt.Fprintf(w, "Two gateways (A, started first, and B) built from this tree on one fresh PostgreSQL database of %d listings and one Redis key prefix, "+
		"the local tier on (its default), log level warn; %d `yes` processes beside them; wrk -t1 -c%d on each, every request a listing at random; "+
		"%d PUTs/s through each gateway to listings %d..%d (each written through both in turn, one write at a time); %g UPDATEs/s in SQL to listings %d..%d "+
		"(the title in the document: they reach the caches through the change feed alone); %d checked readers per gateway reading those %d listings "+
		"from it, both keys, each read in another coding; both gateways' /metrics scraped each second.\n\n",
		o.listings, f.hogs, o.soakConns, o.soakWriteRate, soakPutFirst, soakPutFirst+soakPutListings-1, o.soakSQLRate, soakSQLFirst, soakSQLFirst+soakSQLListings-1,
		o.soakReaders, soakPutListings+soakSQLListings)
	if len(o.soakEnv) > 0 {
		fmt.Fprintf(w, "Both gateways with %s.\n\n", strings.Join(o.soakEnv, " "))
	}
	w.WriteString("Old reads: of a PUT listing, a body below the version whose PUT had returned before the read was sent (TestEndToEndTwoProcessCoherence's floor); " +
		"of a SQL listing, a body older than one an earlier read of the same gateway and key had returned before the read was sent (the feed tests' \"never the old one again\"), " +
		fmt.Sprintf("or older than a version committed more than %v before the read was sent (a SQL write is seen after the feed's lag, so the version before within that bound is not old).\n\n", o.soakSQLBound))

	r.mu.Lock()
	samples := slices.Clone(r.samples)
	examples := slices.Clone(r.examples)
	behind := slices.Clone(r.behind)
	putLat := slices.Clone(r.putLatency)
	non200 := statusCounts(r.non200)
	r.mu.Unlock()

	var off, unknown, breakerOpen, untrusted [2]int
	for _, s := range samples {
		for g := range 2 {
			switch s.tierOn[g] {
			case 0:
				off[g]++
			case -1:
				unknown[g]++
			}
			if s.breaker[g] > 0 {
				breakerOpen[g]++
			}
			if s.trusted[g] == 0 {
				untrusted[g]++
			}
		}
	}
	events, moves := consumerEvents(samples)
	old := c.old()
	var failed []string
	if old > 0 {
		failed = append(failed, fmt.Sprintf("%d old reads", old))
	}
	if f.converged < f.total {
		failed = append(failed, fmt.Sprintf("%d of %d final reads not at the last version after %v", f.total-f.converged, f.total, soakConverge))
	}

	w.WriteString("| proof | result |\n|---|---|\n")
	fmt.Fprintf(w, "| old reads | **%d** of %d checked reads (PUT listings below the floor %d; SQL listings: went back %d, later than %v %d) |\n",
		old, c.reads.Load(), c.oldFloor.Load(), c.wentBack.Load(), o.soakSQLBound, c.sqlLate.Load())
	fmt.Fprintf(w, "| seconds the local tier was off (gateway_cache_local_tier_on 0) | **A %d s, B %d s** of %d samples each (not scraped: A %d, B %d) |\n",
		off[0], off[1], len(samples), unknown[0], unknown[1])
	fmt.Fprintf(w, "| feed consumer role changes | **%d** (%s) |\n", moves, consumerSummary(samples, events))
	fmt.Fprintf(w, "| final reads after the load (%d listings × 2 gateways × 2 keys) | %d of %d at the last version, the last after %v |\n",
		soakPutListings+soakSQLListings, f.converged, f.total, f.slowest.Round(time.Millisecond))
	fmt.Fprintf(w, "| PUT listings' reads older than an earlier read of the same gateway and key, not below the floor (the newer version's PUT had not returned: not old reads) | %d |\n",
		c.putWentBack.Load())
	fmt.Fprintf(w, "| seconds the Redis breaker was not closed (gateway_breaker_state{breaker=\"redis\"} 1 or 2) | A %d s, B %d s |\n", breakerOpen[0], breakerOpen[1])
	fmt.Fprintf(w, "| seconds Redis was not trusted (gateway_cache_redis_trusted 0) | A %d s, B %d s |\n", untrusted[0], untrusted[1])
	fmt.Fprintf(w, "| checked reads' errors | %d transport errors, %d non-200, %d unreadable bodies |\n", c.readErrors.Load(), c.readNon200.Load(), c.unreadable.Load())
	if len(non200) > 0 {
		fmt.Fprintf(w, "| non-200 statuses (reads and PUTs) | %s |\n", non200)
	}
	secs := f.elapsed.Seconds()
	fmt.Fprintf(w, "| writes | %d PUTs (%.1f/s), %d failed, %d ticks skipped (every listing being written); PUT p50 %s, p99 %s, max %s; %d SQL updates (%.1f/s), %d failed |\n",
		c.puts.Load(), float64(c.puts.Load())/secs, c.putFailed.Load(), c.putSkipped.Load(), ms(quantile(putLat, 50)), ms(quantile(putLat, 99)), ms(quantile(putLat, 100)),
		c.sqlWrites.Load(), float64(c.sqlWrites.Load())/secs, c.sqlFailed.Load())
	if len(behind) > 0 {
		fmt.Fprintf(w, "| SQL listings' reads of the version before the last committed | %d (%.2f %% of checked reads): the newer one committed p50 %s, p99 %s, max %s before the read |\n",
			len(behind), 100*float64(len(behind))/float64(max(c.reads.Load(), 1)), ms(quantile(behind, 50)), ms(quantile(behind, 99)), ms(quantile(behind, 100)))
	}
	fmt.Fprintf(w, "| CPU over %v | the machine %.0f %% busy; gateways A %.0f %%, B %.0f %% of a core; the hogs together %.0f %% of a core |\n",
		f.elapsed.Round(time.Second), 100*f.machine, 100*f.cpu[0]/secs, 100*f.cpu[1]/secs, 100*f.hogCPU/secs)

	w.WriteString("\n| gateway | wrk requests/s | p50 | p99 | p99.9 | wrk errors, non-2xx | local hits | Redis hits | store reads (misses) | Redis errors | unacknowledged writes | incoherent | corrupt | feed applied |\n" +
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for g := range 2 {
		wr, b, a := f.wrks[g], f.before[g].Cache, f.after[g].Cache
		rps := float64(wr.Requests) / (float64(wr.DurationUS) / 1e6)
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %s | %d, %d | %d | %d | %d | %d | %d | %d | %d | %d |\n", soakNames[g], rps,
			ms(time.Duration(wr.P50)*time.Microsecond), ms(time.Duration(wr.P99)*time.Microsecond), ms(time.Duration(wr.P999)*time.Microsecond),
			wr.Errors, wr.Non2xx, a.LocalHits-b.LocalHits, a.TierHits-b.TierHits, a.Misses-b.Misses, a.TierErrors-b.TierErrors,
			a.Unacknowledged-b.Unacknowledged, a.Incoherent-b.Incoherent, a.Corrupt-b.Corrupt, f.after[g].Feed.Applied-f.before[g].Feed.Applied)
	}
	var feedErrs []string
	for g := range 2 {
		for stage, n := range f.after[g].Feed.Errors {
			if d := n - f.before[g].Feed.Errors[stage]; d > 0 {
				feedErrs = append(feedErrs, fmt.Sprintf("%s %s %d", soakNames[g], stage, d))
			}
		}
	}
	if len(feedErrs) > 0 {
		slices.Sort(feedErrs)
		fmt.Fprintf(w, "\nFeed errors (gateway_feed_errors_total): %s.\n", strings.Join(feedErrs, ", "))
	}
	if len(events) > 0 {
		fmt.Fprintf(w, "\nThe consumer, each change of who reported gateway_feed_consumer 1: %s.\n", strings.Join(events, "; "))
	}
	if len(examples) > 0 {
		w.WriteString("\nThe first old or unreadable reads:\n\n")
		for _, e := range examples {
			fmt.Fprintf(w, "- %s\n", e)
		}
	}
	r.timeline(w, samples)
	r.logSummary(w)
	if len(failed) > 0 {
		fmt.Fprintf(w, "\n**FAILED: %s.**\n", strings.Join(failed, "; "))
		return strings.Join(failed, "; ")
	}
	return ""
}

// statusCounts prints a count by HTTP status.
func statusCounts(m map[int]int64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d: %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// holderOf names who reports gateway_feed_consumer 1 in a sample: "A",
// "B", "A and B", "none", or "" where a scrape failed.
func holderOf(s soakSample) string {
	if s.consumer[0] < 0 || s.consumer[1] < 0 {
		return ""
	}
	switch {
	case s.consumer[0] == 1 && s.consumer[1] == 1:
		return "A and B"
	case s.consumer[0] == 1:
		return "A"
	case s.consumer[1] == 1:
		return "B"
	}
	return "none"
}

// consumerEvents lists each change of the consumer between samples with
// both scraped, and counts the moves: the role held by another gateway
// than the one that held it last.
func consumerEvents(samples []soakSample) ([]string, int) {
	var events []string
	last, lastHolder, moves := "", "", 0
	for _, s := range samples {
		h := holderOf(s)
		if h == "" {
			continue
		}
		if last != "" && h != last {
			events = append(events, fmt.Sprintf("at %d s %s → %s", int(s.at.Seconds()), last, h))
		}
		if h == "A" || h == "B" {
			if lastHolder != "" && h != lastHolder {
				moves++
			}
			lastHolder = h
		}
		last = h
	}
	return events, moves
}

// consumerSummary says who held the role for how many samples.
func consumerSummary(samples []soakSample, events []string) string {
	count := map[string]int{}
	for _, s := range samples {
		if h := holderOf(s); h != "" {
			count[h]++
		}
	}
	var parts []string
	for _, h := range []string{"A", "B", "A and B", "none"} {
		if count[h] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d s", h, count[h]))
		}
	}
	s := "held by " + strings.Join(parts, ", ")
	if len(events) == 0 {
		s += ", no change"
	}
	return s
}

// timeline writes the run in about ten windows.
func (r *soakRun) timeline(w *strings.Builder, samples []soakSample) {
	if len(samples) < 2 {
		return
	}
	win := max(int(r.opts.soakDuration.Seconds())/10, 5)
	w.WriteString("\n| seconds | gateway requests/s (A + B, all routes) | checked reads | PUTs | SQL updates | old reads | local tier off, s (A, B) | Redis errors (A + B) | Redis breaker not closed, s (A, B) | consumer |\n" +
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	prev := samples[0] // at the start
	for i := 1; i < len(samples); {
		j := i
		for j < len(samples) && int(samples[j].at.Seconds()) < int(samples[i].at.Seconds())/win*win+win {
			j++
		}
		window := samples[i:j]
		end := window[len(window)-1]
		var req, redisErrs float64
		var off, open [2]int
		holders := map[string]bool{}
		for k, s := range window {
			p := prev
			if k > 0 {
				p = window[k-1]
			}
			for g := range 2 {
				if s.requests[g] >= p.requests[g] && p.requests[g] > 0 {
					req += s.requests[g] - p.requests[g]
				}
				if s.redisErrors[g] >= p.redisErrors[g] && p.requests[g] > 0 {
					redisErrs += s.redisErrors[g] - p.redisErrors[g]
				}
				if s.tierOn[g] == 0 {
					off[g]++
				}
				if s.breaker[g] > 0 {
					open[g]++
				}
			}
			if h := holderOf(s); h != "" {
				holders[h] = true
			}
		}
		span := (end.at - prev.at).Seconds()
		fmt.Fprintf(w, "| %d–%d | %.0f | %d | %d | %d | %d | %d, %d | %.0f | %d, %d | %s |\n", int(prev.at.Seconds()+0.5), int(end.at.Seconds()+0.5), req/span,
			end.reads-prev.reads, end.puts-prev.puts, end.sqls-prev.sqls, end.old-prev.old, off[0], off[1], redisErrs, open[0], open[1],
			strings.Join(slices.Sorted(maps.Keys(holders)), ", "))
		prev, i = end, j
	}
}

// logSummary writes the gateways' log lines (warn and above: the lab's
// level) by message, with counts.
func (r *soakRun) logSummary(w *strings.Builder) {
	var rows []string
	for g, s := range r.gws {
		b, err := os.ReadFile(filepath.Join(r.l.work, s.name+".log"))
		if err != nil {
			continue
		}
		count := map[string]int{}
		var order []string
		for line := range strings.Lines(string(b)) {
			var rec struct {
				Level, Msg string
			}
			key := strings.TrimSpace(line)
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg != "" {
				key = rec.Level + " " + rec.Msg
			}
			if key == "" {
				continue
			}
			if count[key] == 0 {
				order = append(order, key)
			}
			count[key]++
		}
		for _, k := range order {
			rows = append(rows, fmt.Sprintf("| %s | %d | %.200s |", soakNames[g], count[k], strings.ReplaceAll(k, "|", `\|`)))
		}
	}
	if len(rows) == 0 {
		w.WriteString("\nThe gateways logged nothing at warn or above.\n")
		return
	}
	w.WriteString("\nThe gateways' log (warn and above), by message:\n\n| gateway | lines | message |\n|---|---:|---|\n")
	w.WriteString(strings.Join(rows, "\n") + "\n")
}
