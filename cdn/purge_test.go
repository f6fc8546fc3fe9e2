package cdn_test

import (
	"context"
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
	if took := time.Since(began); took > 2*time.Second {
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
