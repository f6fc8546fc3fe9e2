package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/faultproxy"
	"github.com/realty-gateway/gateway/internal/gatewaytest"
	"github.com/realty-gateway/gateway/internal/testenv"
)

const (
	password = "fault-suite-pass-word"
	// breakerProbes is the store breaker's half-open probes: that many
	// store reads in a row close it again.
	breakerProbes = 3
	// storeLatency is added to the store's replies in phase g, far within
	// GATEWAY_STORE_TIMEOUT, so that store reads are in flight at any time.
	storeLatency = 50 * time.Millisecond
)

// TestFaults seeds a gateway on its own redis-server (always reached
// through a proxy, which can add latency) and a fresh PostgreSQL database,
// then runs one phase per fault under load, in order, and prints the table.
func TestFaults(t *testing.T) {
	if os.Getenv("GATEWAY_FAULTS") != "1" {
		t.Skip("SKIP: the fault suite is opt-in; run it with GATEWAY_FAULTS=1 go test -count=1 -v ./deploy/faults/")
	}
	began := time.Now()
	rs := startRedis(t)
	db := newPostgresDB(t)
	bin, err := gatewaytest.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built the gateway in %v", time.Since(began).Round(time.Millisecond))
	proxy := faultproxy.New(t, rs.addr)
	// The store is reached through a proxy too, only so that phase h can
	// slow it: then requests are in flight when the listener closes.
	storeURL, err := url.Parse(db.url)
	if err != nil {
		t.Fatal(err)
	}
	pgProxy := faultproxy.New(t, storeURL.Host)
	storeURL.Host = pgProxy.Addr()
	prefix := testenv.RandomName("faults") + ":"
	env := map[string]string{
		"GATEWAY_DATA_DIR":     t.TempDir(),
		"GATEWAY_STORE_URL":    storeURL.String(),
		"GATEWAY_REDIS_URL":    "redis://" + proxy.Addr() + "/0",
		"GATEWAY_REDIS_PREFIX": prefix,
		"GATEWAY_JWT_SECRET":   "fault-suite-secret-fault-suite-secret",
		// Cached copies are fresh for 1s, so the store is read all along
		// and "PostgreSQL stopped" finds them past fresh at once.
		"GATEWAY_CACHE_TTL":   "1s",
		"GATEWAY_CACHE_STALE": "1h",
		// A short window keeps one phase's store failures out of the next.
		"GATEWAY_BREAKER_WINDOW":       "5s",
		"GATEWAY_BREAKER_MIN_REQUESTS": "5",
		"GATEWAY_BREAKER_OPEN_FOR":     "1s",
		"GATEWAY_BREAKER_PROBES":       fmt.Sprint(breakerProbes),
		// 40 times the latency phase g adds: a store call that a busy
		// machine slows is still answered, so that only the faults make
		// 503s.
		"GATEWAY_STORE_TIMEOUT":  "2s",
		"GATEWAY_SHUTDOWN_DELAY": "1s",
		// Every login of the suite comes from one address with one key;
		// the login limits are not what it tests.
		"GATEWAY_LOGIN_IP_ATTEMPTS":  "1000000",
		"GATEWAY_LOGIN_KEY_ATTEMPTS": "1000000",
	}
	w := seed(t, bin, env, rs.addr, prefix)
	s := &suite{w: w, rs: rs, proxy: proxy, pgProxy: pgProxy, db: db}
	w.p = gatewaytest.Start(t, bin, env)
	w.canonicalBodies(t)
	t.Logf("seeded %d listings and read them once by both forms; %v so far", listings, time.Since(began).Round(time.Millisecond))

	var rows []*phaseResult
	defer func() { report(t, rows, time.Since(began)) }()
	phase := func(spec phaseSpec, run func(t *testing.T, res *phaseResult)) {
		res := &phaseResult{spec: spec}
		rows = append(rows, res)
		t.Run(spec.name, func(t *testing.T) {
			logFrom := len(w.p.Logs())
			before, _ := w.p.ReadStats()
			run(t, res)
			if after, err := w.p.ReadStats(); err == nil {
				tierErrors := after.Cache.TierErrors - before.Cache.TierErrors
				res.note("store loads %d, Redis errors %d", after.Cache.StoreLoads-before.Cache.StoreLoads, tierErrors)
				if spec.redisFault && tierErrors == 0 {
					t.Errorf("no Redis error counted: the fault did not reach the gateway")
				}
				// A busy machine can make Redis reads time out during a
				// store fault: then a key cached in Redis has no tier left
				// to answer from, and 503 is right. Without a Redis error
				// it is not.
				res.mu.Lock()
				bothDown := res.bothDown503
				res.mu.Unlock()
				if bothDown > 0 {
					res.note("%d 503s to keys cached in Redis, whose read failed too", bothDown)
					if tierErrors == 0 {
						t.Errorf("%d 503s to keys cached in Redis, and no Redis error counted", bothDown)
					}
				}
			}
			logSummary(t, w.p.Logs()[logFrom:])
			checkCommon(t, res)
		})
		time.Sleep(300 * time.Millisecond)
	}

	phase(phaseSpec{name: "a baseline"}, s.baseline)
	phase(phaseSpec{name: "b Redis stopped, restarted", redisFault: true}, s.redisStopped)
	phase(phaseSpec{name: "c Redis paused (SIGSTOP)", redisFault: true}, s.redisPaused)
	phase(phaseSpec{name: "d Redis slowed +200 ms", redisFault: true}, s.redisSlowed)
	phase(phaseSpec{name: "e PostgreSQL connections terminated", storeFault: true, checkCache: true}, s.postgresTerminated)
	phase(phaseSpec{name: "f PostgreSQL stopped", storeFault: true, checkCache: true, coldShare: 0.15}, s.postgresStopped)
	phase(phaseSpec{name: "g abuse: compression bombs, unknown-key flood"}, s.abuse)
	phase(phaseSpec{name: "h SIGTERM under load"}, s.sigterm)
}

// suite is what the phases act on: the gateway under load, its own
// redis-server, the proxies in front of Redis and PostgreSQL, and its
// database.
type suite struct {
	w       *world
	rs      *redisServer
	proxy   *faultproxy.Proxy // in front of Redis
	pgProxy *faultproxy.Proxy // in front of PostgreSQL
	db      *postgresDB
}

// baseline runs the load with no fault.
func (s *suite) baseline(t *testing.T, res *phaseResult) {
	w := s.w
	w.runLoad(t, res, 3*time.Second, nil)
}

// redisStopped kills redis-server under load and restarts it: hits must come
// back without a gateway restart.
func (s *suite) redisStopped(t *testing.T, res *phaseResult) {
	w, rs := s.w, s.rs
	var hitAfter time.Duration = -1
	w.runLoad(t, res, 4*time.Second, func(ctx context.Context, _ context.CancelFunc) {
		sleep(ctx, time.Second)
		if err := rs.kill(); err != nil {
			t.Errorf("kill redis-server: %v", err)
			return
		}
		res.note("killed at 1s")
		time.Sleep(1500 * time.Millisecond)
		if err := rs.restart(); err != nil {
			t.Errorf("restart redis-server: %v", err)
			return
		}
		restarted := time.Now()
		if w.waitHit(5 * time.Second) {
			hitAfter = time.Since(restarted)
		}
	})
	if hitAfter < 0 {
		t.Errorf("no X-Cache: HIT within 5s of Redis coming back (gateway not restarted)")
		res.note("restarted at 2.5s, no HIT within 5s")
	} else {
		res.note("restarted at 2.5s, first HIT %s ms later", ms(hitAfter))
	}
}

// redisPaused stops redis-server with SIGSTOP for 2 s under load.
func (s *suite) redisPaused(t *testing.T, res *phaseResult) {
	w, rs := s.w, s.rs
	w.runLoad(t, res, 4*time.Second, func(ctx context.Context, _ context.CancelFunc) {
		sleep(ctx, time.Second)
		if err := rs.pause(); err != nil {
			t.Errorf("SIGSTOP redis-server: %v", err)
			return
		}
		time.Sleep(2 * time.Second)
		if err := rs.resume(); err != nil {
			t.Errorf("SIGCONT redis-server: %v", err)
		}
	})
	res.note("SIGSTOP 1s–3s")
	if !w.waitHit(5 * time.Second) {
		t.Errorf("no X-Cache: HIT within 5s of SIGCONT")
	}
}

// redisSlowed adds 200 ms to every Redis reply for 3 s under load.
func (s *suite) redisSlowed(t *testing.T, res *phaseResult) {
	w, proxy := s.w, s.proxy
	w.runLoad(t, res, 4*time.Second, func(ctx context.Context, _ context.CancelFunc) {
		sleep(ctx, 500*time.Millisecond)
		proxy.SetLatency(200 * time.Millisecond)
		sleep(ctx, 3*time.Second)
		proxy.SetLatency(0)
	})
	proxy.SetLatency(0)
	res.note("+200 ms per reply 0.5s–3.5s")
}

// postgresTerminated empties the cache, then terminates the store's
// PostgreSQL sessions every 250 ms under load.
func (s *suite) postgresTerminated(t *testing.T, res *phaseResult) {
	w, db := s.w, s.db
	if err := w.rdb.FlushDB(context.Background()).Err(); err != nil {
		t.Fatalf("flush Redis: %v", err)
	}
	terminated, rounds := 0, 0
	w.runLoad(t, res, 4*time.Second, func(ctx context.Context, _ context.CancelFunc) {
		for ctx.Err() == nil {
			sleep(ctx, 250*time.Millisecond)
			n, err := db.terminate()
			if err != nil {
				t.Errorf("terminate backends: %v", err)
				return
			}
			terminated += n
			rounds++
		}
	})
	res.note("cache flushed first; %d backends terminated in %d rounds", terminated, rounds)
	if terminated == 0 {
		t.Errorf("no backend was terminated: the fault did not happen")
	}
}

// postgresStopped closes the database under load: cached listings are served
// stale, the rest and logins get 503; then it re-opens the database and
// waits for the breaker to close.
func (s *suite) postgresStopped(t *testing.T, res *phaseResult) {
	w, db := s.w, s.db
	if err := db.stop(); err != nil {
		t.Fatalf("close database: %v", err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = db.start()
		}
	}()
	w.runLoad(t, res, 4*time.Second, nil)
	res.mu.Lock()
	stale, loginOK, login503, s503 := res.stale, res.loginOK, res.login503, res.s503
	lat503, lat503bo := slices.Clone(res.lat503), slices.Clone(res.lat503bo)
	res.mu.Unlock()
	res.note("p99 of 503s %s ms (%d while the breaker was open: p99 %s ms)", ms(p99(lat503)), len(lat503bo), ms(p99(lat503bo)))
	if stale == 0 {
		t.Errorf("no X-Cache: STALE with the store down and cached copies past fresh")
	}
	if s503 == 0 {
		t.Errorf("no 503 for uncached listings with the store down")
	}
	if loginOK > 0 || login503 == 0 {
		t.Errorf("logins with the store down: %d 200, %d 503; want 503 only", loginOK, login503)
	}
	if len(lat503bo) == 0 {
		t.Errorf("no 503 while the breaker was open")
	} else if d := p99(lat503bo); d >= 500*time.Millisecond {
		t.Errorf("p99 of 503s with the breaker open = %v, want < 500ms", d)
	}
	w.probeStoreDown(t)

	if err := db.start(); err != nil {
		t.Fatalf("re-open database: %v", err)
	}
	stopped = false
	reopened := time.Now()
	// Recovery: an uncached listing answers 200, then the breaker
	// closes: consecutive store reads (each a half-open probe) succeed,
	// read one at a time so that none is turned away as an excess
	// probe. Phase g then starts with a closed breaker.
	deadline := reopened.Add(15 * time.Second)
	first, closed := time.Duration(-1), time.Duration(-1)
	for streak, n := 0, int64(0); closed < 0 && time.Now().Before(deadline); n++ {
		no := int64(listings) - n%coldSet
		w.rdb.Del(context.Background(), w.redisKey(no, false))
		status, xcache, body := w.get(w.readPath(no, false))
		if status != http.StatusOK {
			streak = 0
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if !bytes.Equal(body, w.canonical[no]) {
			t.Errorf("read after recovery: %s body differs from the stored one (X-Cache %s)", w.readPath(no, false), xcache)
		}
		if first < 0 {
			first = time.Since(reopened)
		}
		if xcache != "MISS" {
			continue // not a store read
		}
		if streak++; streak >= breakerProbes {
			if s, err := w.p.ReadStats(); err == nil && !s.BreakerOpen {
				closed = time.Since(reopened)
			}
		}
	}
	switch {
	case first < 0:
		t.Errorf("no 200 for an uncached listing within 15s of re-opening the database")
		res.note("no recovery within 15s")
	case closed < 0:
		t.Errorf("first 200 %v after re-opening, but no %d store reads in a row succeeded within 15s", first, breakerProbes)
		res.note("first 200 %s ms after re-opening, breaker not closed within 15s", ms(first))
	default:
		res.note("first 200 for an uncached listing %s ms after re-opening, %d store reads in a row by %s ms", ms(first), breakerProbes, ms(closed))
	}
}

// sigterm sends SIGTERM under load, with the store slowed so that requests
// are in flight: readiness turns false first, the listener closes after the
// shutdown delay, in-flight requests complete, and the process exits 0.
func (s *suite) sigterm(t *testing.T, res *phaseResult) {
	w, pgProxy := s.w, s.pgProxy
	var first503, exited time.Duration = -1, -1
	var exitErr error
	pgProxy.SetLatency(storeLatency)
	defer pgProxy.SetLatency(0)
	w.runLoad(t, res, 6*time.Second, func(ctx context.Context, cancel context.CancelFunc) {
		sleep(ctx, time.Second)
		sent := time.Now()
		res.setStop(sent)
		if err := w.p.Signal(syscall.SIGTERM); err != nil {
			t.Errorf("SIGTERM: %v", err)
			return
		}
		client := &http.Client{Timeout: time.Second}
		for time.Since(sent) < 5*time.Second {
			resp, err := client.Get(w.p.AdminBase + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable {
					first503 = time.Since(sent)
					break
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		select {
		case <-w.p.Done():
			exited = time.Since(sent)
			exitErr = w.p.Wait()
		case <-time.After(20 * time.Second):
		}
		time.Sleep(300 * time.Millisecond) // a few refused connections after the exit
		cancel()
	})
	res.mu.Lock()
	firstRefused, stopAt := res.firstRefused, res.stopAt
	drained := 0 // 200s that arrived after the listener had closed
	for _, at := range res.lateDone {
		if !firstRefused.IsZero() && at.After(firstRefused) {
			drained++
		}
	}
	res.mu.Unlock()
	refusedAfter := time.Duration(-1)
	if !firstRefused.IsZero() {
		refusedAfter = firstRefused.Sub(stopAt)
	}
	res.note("store replies +%v", storeLatency)
	res.note("SIGTERM at 1s; /readyz 503 after %s ms; first refused connection after %s ms; %d whole 200s arrived after that; exit after %s ms",
		ms(first503), ms(refusedAfter), drained, ms(exited))
	switch {
	case first503 < 0:
		t.Errorf("/readyz never answered 503 after SIGTERM")
	case refusedAfter >= 0 && refusedAfter <= first503:
		t.Errorf("the listener refused connections (%v after SIGTERM) before /readyz turned 503 (%v)", refusedAfter, first503)
	}
	if drained == 0 {
		t.Logf("NOTE: no 200 arrived after the listener closed; the drain of in-flight requests was not exercised this time")
	}
	switch {
	case exited < 0:
		t.Errorf("the gateway did not exit within 20s of SIGTERM")
	case exitErr != nil:
		t.Errorf("the gateway exited with %v after SIGTERM", exitErr)
	}
}

// seed creates a firm, a passwordless and a password user, and the
// listings, through the binary's admin commands.
func seed(t *testing.T, bin string, env map[string]string, redisAddr, prefix string) *world {
	t.Helper()
	f := gatewaytest.Admin(t, bin, env, "", "firm", "add", "--name", "Fault Realty")
	firm, key := int64(f["firmId"].(float64)), f["apiKey"].(string)
	gatewaytest.Admin(t, bin, env, "", "user", "add", "--firm", fmt.Sprint(firm), "--email", "otp@faults.example")
	u := gatewaytest.Admin(t, bin, env, "", "user", "add", "--firm", fmt.Sprint(firm), "--email", "agent@faults.example", "--password", password)
	user := int64(u["firmUserId"].(float64))

	ls := make([]map[string]any, listings)
	for i := range ls {
		n := int64(i + 1)
		ls[i] = map[string]any{
			"id": idBase + n, "no": n, "firmId": firm, "firmUserId": user,
			"title": fmt.Sprintf("Listing %d", n), "categoryId": 1 + n%5,
			"location": map[string]any{"cityId": 34, "cityName": "Istanbul", "latitude": 41 + float64(n)/1000, "longitude": 29.0},
			"attributes": map[string]any{
				"price": 1000 * n, "priceCurrencyType": "TRY",
				// Bodies from a few hundred bytes to ~6 KB, so that a cut
				// response cannot pass for a whole one.
				"description": strings.Repeat("room with a view ", int(n*37%360)),
			},
		}
	}
	file, err := json.Marshal(ls)
	if err != nil {
		t.Fatal(err)
	}
	if got := gatewaytest.Admin(t, bin, env, string(file), "listing", "import", "-"); got["imported"] != float64(listings) {
		t.Fatalf("import printed %v", got)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = workers * 2
	return &world{
		firm:      firm,
		otpLogin:  fmt.Sprintf(`{"email":"otp@faults.example","key":%q}`, key),
		pwLogin:   fmt.Sprintf(`{"email":"agent@faults.example","password":%q,"key":%q}`, password, key),
		canonical: map[int64][]byte{},
		rdb:       rdb,
		prefix:    prefix,
		client:    &http.Client{Timeout: clientTimeout, Transport: transport},
	}
}

// canonicalBodies logs in, reads every listing once by both forms (which
// must give the same bytes) and keeps that as its canonical body, then
// empties Redis so that the load starts with misses.
func (w *world) canonicalBodies(t *testing.T) {
	t.Helper()
	o := w.login(false)
	var tok struct {
		JWTToken string `json:"jwtToken"`
	}
	if o.status != http.StatusOK || json.Unmarshal(o.body, &tok) != nil || tok.JWTToken == "" {
		t.Fatalf("login: %d %v %s", o.status, o.err, o.body)
	}
	w.token = tok.JWTToken
	for n := int64(1); n <= listings; n++ {
		s1, _, byID := w.get(w.readPath(n, false))
		s2, _, byNumber := w.get(w.readPath(n, true))
		if s1 != http.StatusOK || s2 != http.StatusOK || !bytes.Equal(byID, byNumber) {
			t.Fatalf("listing %d: %d and %d, bodies equal %v", n, s1, s2, bytes.Equal(byID, byNumber))
		}
		w.canonical[n] = byID
	}
	if err := w.rdb.FlushDB(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

// get reads a listing outside the load; transport errors are status 0.
func (w *world) get(path string) (status int, xcache string, body []byte) {
	req, _ := http.NewRequest(http.MethodGet, w.p.Base+path, nil)
	req.Header.Set("Authorization", "Bearer "+w.token)
	req.Header.Set("User-Agent", "fault-suite")
	o := outcome{}
	w.do(req, &o)
	return o.status, o.xcache, o.body
}

// waitHit reads a hot listing until it answers X-Cache: HIT.
func (w *world) waitHit(limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if status, xcache, _ := w.get(w.readPath(1, false)); status == http.StatusOK && xcache == "HIT" {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// probeStoreDown checks one of each answer while the database is closed:
// a cached listing is STALE with the stored body, an uncached one 503 with
// Retry-After, a login 503.
func (w *world) probeStoreDown(t *testing.T) {
	t.Helper()
	// A busy machine can make one Redis read outlast its timeout, and a
	// copy only Redis holds then has no fallback: a few tries.
	var status int
	var xcache string
	var body []byte
	for try := 0; try < 5; try++ {
		if status, xcache, body = w.get(w.readPath(1, true)); status == http.StatusOK {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if status != http.StatusOK || xcache != "STALE" || !bytes.Equal(body, w.canonical[1]) {
		t.Errorf("cached listing with the store down: %d X-Cache %q, body equal %v", status, xcache, bytes.Equal(body, w.canonical[1]))
	}
	req, _ := http.NewRequest(http.MethodGet, w.p.Base+w.readPath(listings-1, true), nil)
	req.Header.Set("Authorization", "Bearer "+w.token)
	req.Header.Set("User-Agent", "fault-suite")
	resp, err := w.client.Do(req)
	if err != nil {
		t.Errorf("uncached listing with the store down: %v", err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Errorf("uncached listing with the store down: %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	if o := w.login(false); o.status != http.StatusServiceUnavailable || !o.retryAfter {
		t.Errorf("login with the store down: %d Retry-After %v", o.status, o.retryAfter)
	}
}

// checkCommon asserts what every phase must hold: the load ran, no body
// was wrong, no 5xx was unexpected, no 4xx at all (every request is
// valid), and no response was cut or lost before the gateway was told to
// stop.
func checkCommon(t *testing.T, r *phaseResult) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := r.requests - r.lateRefused; n < 200 {
		t.Errorf("only %d requests met a listening gateway", n)
	}
	if r.wrong > 0 {
		t.Errorf("%d wrong bodies", r.wrong)
	}
	if r.unexpected5xx > 0 {
		t.Errorf("%d unexpected 5xx (%d of them 500)", r.unexpected5xx, r.c500)
	}
	if r.c4xx > 0 {
		t.Errorf("%d 4xx answers to valid requests", r.c4xx)
	}
	if r.cut > 0 {
		t.Errorf("%d cut responses", r.cut)
	}
	if r.connErrs > 0 || r.refused > 0 {
		t.Errorf("%d requests without a response and %d refused connections while the gateway was running", r.connErrs, r.refused)
	}
	for _, e := range r.examples {
		t.Log("  e.g. " + e)
	}
}

// logSummary logs how often each message appeared in the gateway's log
// during a phase, with its attributes; digits are folded into "N" so that
// per-listing messages count as one.
func logSummary(t *testing.T, log string) {
	t.Helper()
	counts := map[string]int{}
	for line := range strings.Lines(log) {
		var entry map[string]any
		if json.Unmarshal([]byte(line), &entry) != nil {
			continue
		}
		level, msg := entry["level"], entry["msg"]
		var attrs []string
		for _, k := range slices.Sorted(maps.Keys(entry)) {
			if k == "time" || k == "level" || k == "msg" || k == "config" {
				continue
			}
			v := digits.ReplaceAllString(fmt.Sprint(entry[k]), "N")
			if len(v) > 100 {
				v = v[:100] + "…"
			}
			attrs = append(attrs, k+"="+v)
		}
		counts[fmt.Sprintf("%v %q %s", level, msg, strings.Join(attrs, " "))]++
	}
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		t.Logf("  gateway log: %d× %s", counts[k], k)
	}
}

var digits = regexp.MustCompile(`[0-9]+`)

// report prints the table and writes it to GATEWAY_FAULTS_REPORT.
func report(t *testing.T, rows []*phaseResult, took time.Duration) {
	var b strings.Builder
	b.WriteString("| phase | requests | 2xx | 4xx | 5xx (expected) | wrong | p99 ms | notes |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rows {
		r.mu.Lock()
		notes := []string{fmt.Sprintf("HIT %d, MISS %d, STALE %d", r.hits, r.misses, r.stale)}
		if r.s503 > 0 {
			notes = append(notes, fmt.Sprintf("503: %d", r.s503))
		}
		if r.logins > 0 {
			notes = append(notes, fmt.Sprintf("logins %d (200: %d, 503: %d)", r.logins, r.loginOK, r.login503))
		}
		if r.refused+r.connErrs+r.cut > 0 {
			notes = append(notes, fmt.Sprintf("refused %d, no response %d, cut %d", r.refused, r.connErrs, r.cut))
		}
		if r.lateRefused+r.lateConnErrs > 0 {
			notes = append(notes, fmt.Sprintf("after SIGTERM: %d refused connections and %d logins closed before a response (not failures)", r.lateRefused, r.lateConnErrs))
		}
		notes = append(notes, "max "+ms(slices.Max(append([]time.Duration{0}, r.latencies...)))+" ms")
		notes = append(notes, r.notes...)
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d (%d) | %d | %s | %s |\n",
			r.spec.name, r.requests, r.c2xx, r.c4xx, r.c5xx, r.expected503, r.wrong, ms(p99(r.latencies)), strings.Join(notes, "; "))
		r.mu.Unlock()
	}
	fmt.Fprintf(&b, "\n%d workers, one request per %v each at most, 1 in %d a login; suite %s.\n",
		workers, workerInterval, loginEvery, took.Round(time.Second))
	t.Log("fault suite results:\n" + b.String())
	if path := os.Getenv("GATEWAY_FAULTS_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Errorf("write %s: %v", path, err)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
