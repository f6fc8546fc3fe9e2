package cdn_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
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
	p := cdn.NewPurger(cdn.Config{URL: settings.DSN(fake.srv.URL + "/{key}"), Timeout: time.Second,
		RepurgeAfter: time.Hour, GiveUpAfter: time.Minute, Queue: 10}, quiet())
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
	p := cdn.NewPurger(cdn.Config{URL: settings.DSN(fake.srv.URL + "/{key}"), Timeout: time.Second,
		RepurgeAfter: time.Hour, GiveUpAfter: 300 * time.Millisecond, Queue: 10}, quiet())
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
	p := cdn.NewPurger(cdn.Config{URL: settings.DSN(fake.srv.URL + "/{key}"), Timeout: time.Second,
		RepurgeAfter: 100 * time.Millisecond, GiveUpAfter: time.Minute, Queue: 10}, quiet())
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
	p := cdn.NewPurger(cdn.Config{URL: settings.DSN(fake.srv.URL + "/{key}"), Timeout: time.Second,
		RepurgeAfter: 200 * time.Millisecond, GiveUpAfter: time.Minute, Queue: 10}, quiet())
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
	p := cdn.NewPurger(cdn.Config{URL: settings.DSN(fake.srv.URL + "/{key}"), Sync: true, Timeout: 300 * time.Millisecond,
		RepurgeAfter: time.Hour, GiveUpAfter: time.Minute, Queue: 10}, quiet())
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
	p := cdn.NewPurger(cdn.Config{URL: settings.DSN(fake.srv.URL + "/{key}"), Timeout: time.Second, GiveUpAfter: time.Minute, Queue: 2}, quiet())
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
	p := cdn.NewPurger(cdn.Config{URL: settings.DSN(fake.srv.URL + "/{key}"), Timeout: time.Second, GiveUpAfter: time.Minute, Queue: 10}, quiet())
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
	p := cdn.NewPurger(cdn.Config{URL: settings.DSN(fake.srv.URL + "/purge_cache"), Format: cdn.FormatCloudflare, Timeout: time.Second,
		RepurgeAfter: time.Hour, GiveUpAfter: time.Minute, Queue: 10}, quiet())
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
