package cdn_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/cdn"
	"github.com/realty-gateway/gateway/internal/settings"
	"github.com/realty-gateway/gateway/internal/testenv"
)

func TestPurgerPostsEachKey(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+string(body)+" "+r.Header.Get("Fastly-Key"))
		mu.Unlock()
	}))
	defer srv.Close()
	p := cdn.NewPurger(cdn.Config{
		URL: settings.DSN(srv.URL + "/purge/{key}"), Header: "Fastly-Key: tok", Timeout: time.Second, Queue: 10,
	}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)

	p.Purge("realty-1", "firm-1")
	testenv.WaitFor(t, func() bool { return p.Sent() == 2 })
	mu.Lock()
	defer mu.Unlock()
	want := []string{"POST /purge/realty-1 realty-1 tok", "POST /purge/firm-1 firm-1 tok"}
	if !slices.Equal(got, want) {
		t.Fatalf("purges %q, want %q", got, want)
	}
}

func TestPurgerNeverBlocksAndCountsFailures(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	p := cdn.NewPurger(cdn.Config{URL: settings.DSN(srv.URL + "/{key}"), Timeout: time.Second, Queue: 2},
		slog.New(slog.DiscardHandler))

	// Nothing runs the queue yet: the third key is dropped, not waited for.
	p.Purge("a", "b", "c")
	if p.Dropped() != 1 {
		t.Fatalf("dropped = %d, want 1 for a full queue", p.Dropped())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)
	testenv.WaitFor(t, func() bool { return p.Dropped() == 3 })
	if p.Sent() != 0 {
		t.Fatalf("sent = %d for a failing CDN", p.Sent())
	}
}

func TestPurgerSendsWhatIsQueuedWhenStopped(t *testing.T) {
	var mu sync.Mutex
	got := 0
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		mu.Lock()
		got++
		mu.Unlock()
	}))
	defer srv.Close()
	p := cdn.NewPurger(cdn.Config{URL: settings.DSN(srv.URL + "/{key}"), Timeout: time.Second, Queue: 10},
		slog.New(slog.DiscardHandler))
	p.Purge("a", "b", "c")
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // shutting down before the worker saw them
	p.Run(ctx)
	if p.Sent() != 3 || got != 3 {
		t.Fatalf("sent %d, received %d; want the 3 queued purges drained", p.Sent(), got)
	}
}
