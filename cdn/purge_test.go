package cdn_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/breaker"
	"github.com/realty-gateway/gateway/cdn"
	"github.com/realty-gateway/gateway/internal/settings"
	"github.com/realty-gateway/gateway/internal/testenv"
)

// fakeCDN records each request as "METHOD path body header=value…", and
// answers with status() (200 when nil).
type fakeCDN struct {
	mu     sync.Mutex
	got    []string
	status atomic.Int32
	srv    *httptest.Server
}

func newFakeCDN(t *testing.T, headers ...string) *fakeCDN {
	f := &fakeCDN{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		line := r.Method + " " + r.URL.Path + " " + string(body)
		for _, h := range headers {
			if v := r.Header.Get(h); v != "" {
				line += " " + h + "=" + v
			}
		}
		f.mu.Lock()
		f.got = append(f.got, line)
		f.mu.Unlock()
		if s := f.status.Load(); s != 0 {
			w.WriteHeader(int(s))
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeCDN) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.got)
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newPurger returns a Purger for cfg and deps, failing t if there is none.
func newPurger(t *testing.T, cfg cdn.Config, deps cdn.Deps) *cdn.Purger {
	t.Helper()
	p, err := cdn.NewPurger(cfg, deps)
	if err != nil {
		t.Fatalf("NewPurger: %v", err)
	}
	return p
}

func run(t *testing.T, p *cdn.Purger) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestPurgeSurvivesAnOutage: purges made while the CDN fails are retried
// and delivered soon after it answers again, without another write.
func TestPurgeSurvivesAnOutage(t *testing.T) {
	fake := newFakeCDN(t)
	fake.status.Store(http.StatusServiceUnavailable)
	p := newPurger(t, cdn.Config{URL: settings.DSN(fake.srv.URL + "/{key}"), Timeout: time.Second,
		RepurgeAfter: time.Hour}, cdn.Deps{GiveUpAfter: time.Minute, Queue: 10, Log: quiet()})
	run(t, p)
	for i := range 6 {
		p.Purge(context.Background(), true, "realty-"+string(rune('1'+i)))
	}
	testenv.WaitFor(t, func() bool { return p.Failed() >= 10 }) // the breaker has opened
	fake.status.Store(0)
	testenv.WaitFor(t, func() bool { return p.Sent() == 6 }) // within 5 s, without a new write
	if p.Dropped() != 0 {
		t.Fatalf("%d purges dropped", p.Dropped())
	}
}

func TestPurgeGivenUpOnceTheCopyExpired(t *testing.T) {
	fake := newFakeCDN(t)
	fake.status.Store(http.StatusInternalServerError)
	p := newPurger(t, cdn.Config{URL: settings.DSN(fake.srv.URL + "/{key}"), Timeout: time.Second,
		RepurgeAfter: time.Hour}, cdn.Deps{GiveUpAfter: 300 * time.Millisecond, Queue: 10, Log: quiet()})
	run(t, p)
	p.Purge(context.Background(), true, "realty-1")
	testenv.WaitFor(t, func() bool { return p.Dropped() == 1 })
	if p.Failed() < 2 {
		t.Fatalf("given up after %d attempts, want retries first", p.Failed())
	}
	if n := p.Pending(); n != 0 {
		t.Fatalf("%d pending after the only purge was given up", n)
	}
}

// TestPendingCountsUndeliveredPurges: Pending (gateway_purges_pending)
// counts purges until the CDN took them, through failed attempts, and not
// their delayed repeats.
func TestPendingCountsUndeliveredPurges(t *testing.T) {
	fake := newFakeCDN(t)
	fake.status.Store(http.StatusServiceUnavailable)
	p := newPurger(t, cdn.Config{URL: settings.DSN(fake.srv.URL + "/{key}"), Timeout: time.Second,
		RepurgeAfter: 100 * time.Millisecond}, cdn.Deps{GiveUpAfter: time.Minute, Queue: 10, Log: quiet()})
	run(t, p)
	for _, k := range []string{"a", "b", "c"} {
		p.Purge(context.Background(), true, k)
	}
	testenv.WaitFor(t, func() bool { return p.Failed() >= 6 }) // each tried at least twice
	if n := p.Pending(); n != 3 {
		t.Fatalf("%d pending while the CDN fails, want 3", n)
	}
	fake.status.Store(0)
	testenv.WaitFor(t, func() bool { return p.Sent() >= 3 && p.Pending() == 0 })
	// The repeats go out too, and count nothing.
	testenv.WaitFor(t, func() bool { return p.Sent() >= 6 })
	if n := p.Pending(); n != 0 {
		t.Fatalf("%d pending after every purge and its repeat was delivered", n)
	}
}

// TestPurgeIsRepeated: each purge goes out again after RepurgeAfter, for
// a CDN fetch that was in flight during the write.
func TestPurgeIsRepeated(t *testing.T) {
	fake := newFakeCDN(t)
	p := newPurger(t, cdn.Config{URL: settings.DSN(fake.srv.URL + "/{key}"), Timeout: time.Second,
		RepurgeAfter: 200 * time.Millisecond}, cdn.Deps{GiveUpAfter: time.Minute, Queue: 10, Log: quiet()})
	run(t, p)
	p.Purge(context.Background(), true, "realty-1")
	testenv.WaitFor(t, func() bool { return len(fake.requests()) == 1 })
	first := time.Now()
	testenv.WaitFor(t, func() bool { return len(fake.requests()) == 2 })
	if took := time.Since(first); took < 150*time.Millisecond {
		t.Fatalf("repeated after %v, want after RepurgeAfter", took)
	}
	time.Sleep(400 * time.Millisecond)
	if n := len(fake.requests()); n != 2 {
		t.Fatalf("%d requests, want the purge and one repeat", n)
	}
}

// TestSyncPurge: with Sync a hard purge has reached the CDN when Purge
// returns; a failing CDN costs the write at most the timeout, and the
// purge is retried afterwards.
func TestSyncPurge(t *testing.T) {
	fake := newFakeCDN(t)
	p := newPurger(t, cdn.Config{URL: settings.DSN(fake.srv.URL + "/{key}"), Sync: true, Timeout: 300 * time.Millisecond,
		RepurgeAfter: time.Hour}, cdn.Deps{GiveUpAfter: time.Minute, Queue: 10, Log: quiet()})
	run(t, p)
	p.Purge(context.Background(), true, "realty-1")
	if got := fake.requests(); len(got) != 1 {
		t.Fatalf("requests when Purge returned: %q, want the purge", got)
	}
	fake.status.Store(http.StatusBadGateway)
	began := time.Now()
	p.Purge(context.Background(), true, "realty-2")
	// One answered attempt, not retries until GiveUpAfter (a minute).
	if took := time.Since(began); took > testenv.Patience() {
		t.Fatalf("a failing CDN held the write %v", took)
	}
	fake.status.Store(0)
	testenv.WaitFor(t, func() bool { return p.Sent() == 2 })
}

func TestPurgerNeverBlocks(t *testing.T) {
	fake := newFakeCDN(t)
	p := newPurger(t, cdn.Config{URL: settings.DSN(fake.srv.URL + "/{key}"), Timeout: time.Second}, cdn.Deps{GiveUpAfter: time.Minute, Queue: 2, Log: quiet()})
	// Nothing runs the queue yet: the third purge is dropped, not waited for.
	for _, k := range []string{"a", "b", "c"} {
		p.Purge(context.Background(), true, k)
	}
	if p.Dropped() != 1 {
		t.Fatalf("dropped = %d, want 1 for a full queue", p.Dropped())
	}
	if p.Pending() != 2 {
		t.Fatalf("pending = %d, want the 2 queued, not the dropped one", p.Pending())
	}
}

func TestPurgerSendsWhatIsQueuedWhenStopped(t *testing.T) {
	fake := newFakeCDN(t)
	p := newPurger(t, cdn.Config{URL: settings.DSN(fake.srv.URL + "/{key}"), Timeout: time.Second}, cdn.Deps{GiveUpAfter: time.Minute, Queue: 10, Log: quiet()})
	for _, k := range []string{"a", "b", "c"} {
		p.Purge(context.Background(), true, k)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // shutting down before the worker saw them
	p.Run(ctx)
	if p.Sent() != 3 || len(fake.requests()) != 3 || p.Pending() != 0 {
		t.Fatalf("sent %d, received %d, pending %d; want the 3 queued purges drained", p.Sent(), len(fake.requests()), p.Pending())
	}
}

// TestCloudflarePurgesAreBatched: purges waiting together go out as one
// request with every tag.
func TestCloudflarePurgesAreBatched(t *testing.T) {
	fake := newFakeCDN(t)
	p := newPurger(t, cdn.Config{URL: settings.DSN(fake.srv.URL + "/purge_cache"), Format: cdn.FormatCloudflare, Timeout: time.Second,
		RepurgeAfter: time.Hour}, cdn.Deps{GiveUpAfter: time.Minute, Queue: 10, Log: quiet()})
	for _, k := range []string{"realty-1", "realty-2", "firm-3"} {
		p.Purge(context.Background(), true, k) // queued: Run is not running yet
	}
	run(t, p)
	testenv.WaitFor(t, func() bool { return p.Sent() >= 1 })
	want := []string{`POST /purge_cache {"tags":["realty-1","realty-2","firm-3"]}`}
	if got := fake.requests(); !slices.Equal(got, want) {
		t.Fatalf("requests %q, want %q", got, want)
	}
}

// TestNewPurgerRefusesBadSettings: NewPurger names what it refuses.
func TestNewPurgerRefusesBadSettings(t *testing.T) {
	good := func() (cdn.Config, cdn.Deps) {
		return cdn.Config{URL: "http://cdn.invalid/{key}", Timeout: time.Second},
			cdn.Deps{GiveUpAfter: time.Minute, StoreTimeout: time.Second, Log: quiet()}
	}
	tests := []struct {
		name     string
		change   func(*cdn.Config, *cdn.Deps)
		wantText string
	}{
		{name: "timeout", change: func(c *cdn.Config, _ *cdn.Deps) { c.Timeout = 0 }, wantText: "purge.timeout"},
		{name: "repurge", change: func(c *cdn.Config, _ *cdn.Deps) { c.RepurgeAfter = -1 }, wantText: "purge.repurgeAfter"},
		{name: "format", change: func(c *cdn.Config, _ *cdn.Deps) { c.Format = "akamai" }, wantText: "purge.format"},
		{name: "give up", change: func(_ *cdn.Config, d *cdn.Deps) { d.GiveUpAfter = -1 }, wantText: "giveUpAfter"},
		{name: "store timeout", change: func(_ *cdn.Config, d *cdn.Deps) { d.StoreTimeout = -1 }, wantText: "storeTimeout"},
		{name: "queue", change: func(_ *cdn.Config, d *cdn.Deps) { d.Queue = -1 }, wantText: "queue"},
		{name: "log", change: func(_ *cdn.Config, d *cdn.Deps) { d.Log = nil }, wantText: "log"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, deps := good()
			tt.change(&cfg, &deps)
			if _, err := cdn.NewPurger(cfg, deps); err == nil || !strings.Contains(err.Error(), tt.wantText) {
				t.Fatalf("error %v; want one naming %s", err, tt.wantText)
			}
		})
	}
	cfg, deps := good()
	if _, err := cdn.NewPurger(cfg, deps); err != nil {
		t.Fatalf("NewPurger with good settings: %v", err)
	}
}

// TestBackgroundFailuresRefuseNoWrite: background purges failing while the
// CDN starts (a change feed's replay) open the queue's breaker, and the
// next write's synchronous purge still reaches the CDN as soon as it
// answers: it is judged on its own breaker, not on the replay's failures.
func TestBackgroundFailuresRefuseNoWrite(t *testing.T) {
	fake := newFakeCDN(t)
	fake.status.Store(http.StatusServiceUnavailable)
	p := newPurger(t, cdn.Config{URL: settings.DSN(fake.srv.URL + "/{key}"), Sync: true, Timeout: time.Second,
		RepurgeAfter: time.Hour}, cdn.Deps{GiveUpAfter: time.Minute, Queue: 10, Log: quiet()})
	run(t, p)
	p.PurgeBackground(context.Background(), true, nil, "replayed-1")
	testenv.WaitFor(t, func() bool { return p.BreakerState() == breaker.Open })

	fake.status.Store(0) // the CDN is up
	var delivered atomic.Int32
	p.PurgeThen(context.Background(), true, func(ok bool) {
		if ok {
			delivered.Add(1)
		}
	}, "realty-1")
	if delivered.Load() != 1 || !slices.Contains(fake.requests(), "POST /realty-1 realty-1") {
		t.Fatalf("the write's purge returned undelivered (requests %q): refused by the replay's failures", fake.requests())
	}
	if s := p.SyncBreakerState(); s != breaker.Closed {
		t.Fatalf("the writes' breaker is %v, want closed", s)
	}
}

// TestDeadCDNCostsAWriteOneTimeoutAtMost: against a CDN that never
// answers, a write's synchronous purge waits one timeout, never a retry,
// and after three writes' failures the writes' breaker refuses at once:
// the next write's purge does not reach the CDN and is queued instead.
func TestDeadCDNCostsAWriteOneTimeoutAtMost(t *testing.T) {
	var received atomic.Int32
	dead := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		received.Add(1)
		_, _ = io.Copy(io.Discard, r.Body) // then the server notices the client leaving
		<-r.Context().Done()               // never answers; the client gives up
	}))
	t.Cleanup(dead.Close)
	// A second: the 4th write's "no wait" below has that much headroom on
	// a busy machine.
	const timeout = time.Second
	p := newPurger(t, cdn.Config{URL: settings.DSN(dead.URL + "/{key}"), Sync: true, Timeout: timeout,
		RepurgeAfter: time.Hour}, cdn.Deps{GiveUpAfter: time.Minute, Queue: 10, Log: quiet()})
	// Run is not running: every request the CDN gets is a write's.
	for i := range 3 {
		began := time.Now()
		p.Purge(context.Background(), true, fmt.Sprintf("realty-%d", i))
		if took := time.Since(began); took < timeout || took > timeout+testenv.Patience() {
			t.Fatalf("write %d waited %v for a dead CDN; want one timeout (%v)", i, took, timeout)
		}
	}
	if n := received.Load(); n != 3 {
		t.Fatalf("the CDN got %d requests from 3 writes; want one each, no retry within a write", n)
	}
	if s := p.SyncBreakerState(); s != breaker.Open {
		t.Fatalf("after 3 writes' failures the writes' breaker is %v, want open", s)
	}
	began := time.Now()
	p.Purge(context.Background(), true, "realty-3")
	if took := time.Since(began); took >= timeout {
		t.Fatalf("the 4th write waited %v with the writes' breaker open; want no wait", took)
	}
	if n := received.Load(); n != 3 {
		t.Fatalf("the CDN got %d requests; the 4th write's purge should have been refused by the open breaker", n)
	}
	if n := p.Pending(); n != 4 {
		t.Fatalf("%d purges pending; want all 4 writes' purges queued for retry", n)
	}
}

// TestBackgroundPurgesNeitherWaitNorCrowdOutWrites: with Sync, a
// background purge is queued without an attempt of its own; a burst of
// them fills only the background queue, and a write's purge still finds
// room in its own.
func TestBackgroundPurgesNeitherWaitNorCrowdOutWrites(t *testing.T) {
	fake := newFakeCDN(t)
	fake.status.Store(http.StatusServiceUnavailable)
	p := newPurger(t, cdn.Config{URL: settings.DSN(fake.srv.URL + "/{key}"), Sync: true, Timeout: time.Second,
		RepurgeAfter: time.Hour}, cdn.Deps{GiveUpAfter: time.Minute, Queue: 2, Log: quiet()})
	var givenUp atomic.Int32
	for _, k := range []string{"replayed-1", "replayed-2", "replayed-3"} {
		p.PurgeBackground(context.Background(), true, func(ok bool) {
			if !ok {
				givenUp.Add(1)
			}
		}, k)
	}
	if got := fake.requests(); len(got) != 0 {
		t.Fatalf("background purges were sent at once (%q); want them queued for Run", got)
	}
	if p.Dropped() != 1 || givenUp.Load() != 1 {
		t.Fatalf("dropped %d (told %d); want the third background purge dropped, the queue holding 2", p.Dropped(), givenUp.Load())
	}
	p.PurgeThen(context.Background(), true, func(ok bool) {
		if !ok {
			t.Error("the write's purge was given up: the background burst crowded it out")
		}
	}, "realty-1") // its attempt fails (503): queued
	if got := fake.requests(); !slices.Equal(got, []string{"POST /realty-1 realty-1"}) {
		t.Fatalf("requests %q; want the write's attempt alone", got)
	}
	if p.Dropped() != 1 || p.Pending() != 3 {
		t.Fatalf("dropped %d, pending %d; want the write's purge queued beside the 2 background ones", p.Dropped(), p.Pending())
	}
}

// TestWritesPurgesAreSentFirst: a write's queued purge goes out before
// background purges queued earlier, by the worker and by its last drain at
// shutdown. Run takes from the two queues in random order, so each is
// tried in several rounds.
func TestWritesPurgesAreSentFirst(t *testing.T) {
	want := []string{"POST /realty-1 realty-1", "POST /replayed-1 replayed-1", "POST /replayed-2 replayed-2"}
	for round := range 16 {
		fake := newFakeCDN(t)
		p := newPurger(t, cdn.Config{URL: settings.DSN(fake.srv.URL + "/{key}"), Timeout: time.Second,
			RepurgeAfter: time.Hour}, cdn.Deps{GiveUpAfter: time.Minute, Queue: 10, Log: quiet()})
		p.PurgeBackground(context.Background(), true, nil, "replayed-1")
		p.PurgeBackground(context.Background(), true, nil, "replayed-2")
		p.Purge(context.Background(), true, "realty-1") // queued: no Sync
		stopping := round%2 == 1
		if stopping {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // the last drain of a shutdown
			p.Run(ctx)
		} else {
			run(t, p)
			testenv.WaitFor(t, func() bool { return p.Sent() == 3 })
		}
		if got := fake.requests(); !slices.Equal(got, want) {
			t.Fatalf("round %d (shutting down %v): requests %q, want %q", round, stopping, got, want)
		}
	}
}
