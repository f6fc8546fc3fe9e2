package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/gatewaytest"
)

// Load shape: a bounded number of closed-loop workers, each pacing its
// requests, so that the suite's own CPU use stays modest on two cores.
const (
	workers        = 8
	workerInterval = 2 * time.Millisecond // at most ~500 requests/s per worker
	loginEvery     = 100                  // one request in loginEvery is a login
	passwordEvery  = 4                    // one login in passwordEvery runs argon2id
	clientTimeout  = 10 * time.Second     // above the gateway's 5s request deadline
)

// Listing sets: the hot set takes most reads, the wide set the rest, so that
// some reads miss; the cold set is read by no phase before "PostgreSQL
// stopped", where it stands for listings that are not cached at all.
const (
	listings = 200
	hotSet   = 20
	coldSet  = 20
	idBase   = 5000 // ids are idBase+n and numbers are n, so the two forms differ
)

// world is the seeded gateway that every phase loads.
type world struct {
	p         *gatewaytest.Process
	firm      int64
	token     string
	otpLogin  string
	pwLogin   string
	canonical map[int64][]byte // listing number -> its response bytes
	rdb       *redis.Client    // the suite's own Redis, directly
	prefix    string
	client    *http.Client
}

func (w *world) readPath(no int64, byNumber bool) string {
	if byNumber {
		return fmt.Sprintf("/realty/%d-%d", w.firm, no)
	}
	return fmt.Sprintf("/realty/%d", idBase+no)
}

func (w *world) redisKey(no int64, byNumber bool) string {
	if byNumber {
		return fmt.Sprintf("%srealty:listing:%d-%d", w.prefix, w.firm, no)
	}
	return fmt.Sprintf("%srealty:id:%d", w.prefix, idBase+no)
}

// errKind sorts transport failures.
type errKind int

const (
	errNone    errKind = iota
	errRefused         // the dial was refused: nobody listens
	errConn            // no response: reset, EOF or timeout before the status line
	errCut             // the status line came, the body did not: a cut response
)

// outcome is one request's result.
type outcome struct {
	login        bool
	at           time.Time // when it was sent
	latency      time.Duration
	status       int
	retryAfter   bool
	xcache       string
	wrong        string // why a 200 body is wrong; empty when right
	checked      bool   // cachedBefore is known
	cachedBefore bool   // the requested key was in Redis just before the request
	breakerOpen  bool   // the breaker was open (as last polled) when it was sent
	kind         errKind
	err          error
	body         []byte // judged, then dropped
}

// phaseSpec says what a phase allows.
type phaseSpec struct {
	name string
	// storeFault: 503s with Retry-After are expected for logins and for
	// reads whose key was not in Redis just before the request.
	storeFault bool
	// coldShare is the share of reads that go to the cold set.
	coldShare float64
	// checkCache looks the requested key up in Redis before each read,
	// which storeFault needs.
	checkCache bool
	// redisFault: the phase must see Redis errors counted in /stats.
	redisFault bool
}

// phaseResult aggregates the outcomes of one phase.
type phaseResult struct {
	spec phaseSpec

	mu                          sync.Mutex
	requests                    int
	c2xx, c4xx, c5xx            int
	c500                        int
	s503, expected503           int
	unexpected5xx               int
	bothDown503                 int // 503s to keys cached in Redis, in a store fault
	wrong                       int
	stale, hits, misses         int
	logins, loginOK, login503   int
	refused, connErrs, cut      int
	lateConnErrs, lateRefused   int // logins without a response, refused connections: after SIGTERM
	latencies, lat503, lat503bo []time.Duration
	examples                    []string
	notes                       []string
	stopAt                      time.Time // phase g: when SIGTERM was sent
	firstRefused                time.Time
	lateDone                    []time.Time // when 200s after SIGTERM arrived
}

func (r *phaseResult) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

func (r *phaseResult) example(format string, args ...any) {
	if len(r.examples) < 8 {
		r.examples = append(r.examples, fmt.Sprintf(format, args...))
	}
}

func (r *phaseResult) setStop(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopAt = at
}

func (r *phaseResult) add(o outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	if o.login {
		r.logins++
	}
	late := !r.stopAt.IsZero() && !o.at.Add(o.latency).Before(r.stopAt)
	switch o.kind {
	case errRefused:
		if r.firstRefused.IsZero() || o.at.Before(r.firstRefused) {
			r.firstRefused = o.at
		}
		if late {
			r.lateRefused++
			return
		}
		r.refused++
		r.example("connection refused at %s: %v", o.at.Format("15:04:05.000"), o.err)
		return
	case errConn:
		// After SIGTERM a login may meet a kept-alive connection that the
		// draining gateway closed before reading it: a POST is not retried
		// by the client. A GET is retried on a new connection (and then
		// refused), so a read without a response is a failure even then.
		if late && o.login {
			r.lateConnErrs++
			return
		}
		r.connErrs++
		r.example("no response (login=%v) after %v: %v", o.login, o.latency.Round(time.Millisecond), o.err)
		return
	case errCut:
		r.cut++
		r.example("cut response %d (login=%v) after %v: %v", o.status, o.login, o.latency.Round(time.Millisecond), o.err)
		return
	}
	r.latencies = append(r.latencies, o.latency)
	if late && o.status == http.StatusOK {
		r.lateDone = append(r.lateDone, o.at.Add(o.latency))
	}
	switch {
	case o.status >= 500:
		r.c5xx++
	case o.status >= 400:
		r.c4xx++
		r.example("%d (login=%v)", o.status, o.login)
	case o.status >= 200 && o.status < 300:
		r.c2xx++
	}
	if o.login {
		switch o.status {
		case http.StatusOK:
			r.loginOK++
		case http.StatusServiceUnavailable:
			r.login503++
		}
	}
	switch o.xcache {
	case "STALE":
		r.stale++
	case "HIT":
		r.hits++
	case "MISS":
		r.misses++
	}
	if o.wrong != "" {
		r.wrong++
		r.example("wrong body: %s", o.wrong)
	}
	if o.status == http.StatusServiceUnavailable {
		r.s503++
		r.lat503 = append(r.lat503, o.latency)
		if o.breakerOpen {
			r.lat503bo = append(r.lat503bo, o.latency)
		}
	}
	if o.status < 500 {
		return
	}
	expected := o.status == http.StatusServiceUnavailable && o.retryAfter && r.spec.storeFault &&
		(o.login || o.checked && !o.cachedBefore)
	if expected {
		r.expected503++
		return
	}
	if o.status == http.StatusServiceUnavailable && o.retryAfter && r.spec.storeFault && o.checked && o.cachedBefore {
		// Cached in Redis, but the read of it failed too: right only where
		// Redis failed meanwhile, which the phase checks (bothDown503).
		r.bothDown503++
		return
	}
	if o.status == http.StatusInternalServerError {
		r.c500++
	}
	r.unexpected5xx++
	switch {
	case o.login:
		r.example("unexpected %d to a login (Retry-After %v)", o.status, o.retryAfter)
	case o.checked:
		r.example("unexpected %d to a read (Retry-After %v, key in Redis before: %v)", o.status, o.retryAfter, o.cachedBefore)
	default:
		r.example("unexpected %d to a read (Retry-After %v)", o.status, o.retryAfter)
	}
}

func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)*99+99)/100-1]
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64)
}

// runLoad runs the workers for d, calling fault (if any) alongside with a
// context that ends with the load and a func that ends the load early. It
// returns when the workers and fault are done.
func (w *world) runLoad(t *testing.T, res *phaseResult, d time.Duration, fault func(ctx context.Context, stop context.CancelFunc)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()

	var breakerOpen atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() { // the breaker's state, for the latency of 503s while it is open
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for {
			if s, err := w.p.ReadStats(); err == nil {
				breakerOpen.Store(s.BreakerOpen)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	for i := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			next := time.Now()
			for n := 0; ctx.Err() == nil; n++ {
				if wait := time.Until(next); wait > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(wait):
					}
				}
				next = time.Now().Add(workerInterval)
				var o outcome
				if rng.IntN(loginEvery) == 0 {
					o = w.login(rng.IntN(passwordEvery) == 0)
				} else {
					o = w.read(rng, res.spec, &breakerOpen)
				}
				res.add(o)
				if o.kind == errRefused {
					// Nobody listens (after a drain): do not spin.
					select {
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond):
					}
				}
			}
		})
	}
	if fault != nil {
		wg.Go(func() { fault(ctx, cancel) })
	}
	wg.Wait()
}

func (w *world) pick(rng *rand.Rand, spec phaseSpec) int64 {
	if spec.coldShare > 0 && rng.Float64() < spec.coldShare {
		return int64(listings - coldSet + 1 + rng.IntN(coldSet))
	}
	if rng.IntN(100) < 70 {
		return int64(1 + rng.IntN(hotSet))
	}
	return int64(hotSet + 1 + rng.IntN(listings-hotSet-coldSet))
}

func (w *world) read(rng *rand.Rand, spec phaseSpec, breakerOpen *atomic.Bool) outcome {
	no, byNumber := w.pick(rng, spec), rng.IntN(2) == 0
	var o outcome
	if spec.checkCache {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		n, err := w.rdb.Exists(ctx, w.redisKey(no, byNumber)).Result()
		cancel()
		o.checked, o.cachedBefore = err == nil, n == 1
	}
	req, _ := http.NewRequest(http.MethodGet, w.p.Base+w.readPath(no, byNumber), nil)
	req.Header.Set("Authorization", "Bearer "+w.token)
	req.Header.Set("User-Agent", "fault-suite")
	o.breakerOpen = breakerOpen.Load()
	w.do(req, &o)
	if o.kind == errNone && o.status == http.StatusOK {
		o.wrong = w.judge(no, byNumber, o.xcache, o.body)
	}
	return o
}

func (w *world) login(password bool) outcome {
	body := w.otpLogin
	if password {
		body = w.pwLogin
	}
	req, _ := http.NewRequest(http.MethodPost, w.p.Base+"/auth/login", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "fault-suite")
	o := outcome{login: true}
	w.do(req, &o)
	if o.kind == errNone && o.status == http.StatusOK && !bytes.Contains(o.body, []byte(`"jwtToken":"`)) {
		o.wrong = fmt.Sprintf("login 200 without a token: %.200s", o.body)
	}
	return o
}

// judge says why a 200 listing body is wrong, or "" when it is the
// canonical body. With no writes during the suite, the canonical body is
// the only right answer, stale or not.
func (w *world) judge(no int64, byNumber bool, xcache string, body []byte) string {
	want := w.canonical[no]
	switch {
	case bytes.Equal(body, want):
		if xcache != "HIT" && xcache != "MISS" && xcache != "STALE" {
			return fmt.Sprintf("%s: X-Cache %q", w.readPath(no, byNumber), xcache)
		}
		return ""
	case xcache == "STALE":
		return fmt.Sprintf("%s: STALE body differs from the stored one (%d bytes, want %d)", w.readPath(no, byNumber), len(body), len(want))
	default:
		return fmt.Sprintf("%s: X-Cache %s body differs from the stored one and is not marked STALE (%d bytes, want %d): %.120s",
			w.readPath(no, byNumber), xcache, len(body), len(want), body)
	}
}

// do sends req and fills in o.
func (w *world) do(req *http.Request, o *outcome) {
	o.at = time.Now()
	resp, err := w.client.Do(req)
	if err != nil {
		o.latency, o.err, o.kind = time.Since(o.at), err, errConn
		if errors.Is(err, syscall.ECONNREFUSED) {
			o.kind = errRefused
		}
		return
	}
	o.status = resp.StatusCode
	o.retryAfter = resp.Header.Get("Retry-After") != ""
	o.xcache = resp.Header.Get("X-Cache")
	o.body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	o.latency = time.Since(o.at)
	if err != nil {
		o.err, o.kind = err, errCut
	}
}
