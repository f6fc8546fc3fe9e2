package cache

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/upstream"
)

// TestFreshFlightsNeverJoinALoadUnderWay: callers that arrive while a load
// runs share the next load, which begins only after the first ended.
func TestFreshFlightsNeverJoinALoadUnderWay(t *testing.T) {
	var g freshFlights
	var runs atomic.Int64
	release := make(chan struct{})
	load := func() (any, error) {
		n := runs.Add(1)
		if n == 1 {
			<-release
		}
		return n, nil
	}
	first := g.doChan("k", load)
	testenv.Eventually(t, "the first load started", func() bool { return runs.Load() != 0 })
	var wg sync.WaitGroup
	results := make([]int64, 5)
	for i := range results {
		ch := g.doChan("k", load)
		wg.Go(func() {
			r := <-ch
			results[i] = r.Val.(int64)
			if !r.Shared {
				t.Errorf("caller %d: not shared", i)
			}
		})
	}
	close(release)
	if r := <-first; r.Val.(int64) != 1 || r.Shared {
		t.Fatalf("first caller got %+v; want run 1, not shared", r)
	}
	wg.Wait()
	for i, got := range results {
		if got != 2 {
			t.Fatalf("caller %d got run %d; want run 2, which began after it arrived", i, got)
		}
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("%d runs; want 2", n)
	}
	if r := <-g.doChan("k", load); r.Val.(int64) != 3 {
		t.Fatalf("a caller after both got run %v; want a new run 3", r.Val)
	}
}

// TestCopiesKeptInProcessCarryTheirHTTPDate: a copy the local tier keeps
// carries its Last-Modified formatted once, as the gateway would send it;
// a recorded time still ahead of the clock, or none, is left to the
// answer.
func TestCopiesKeptInProcessCarryTheirHTTPDate(t *testing.T) {
	now := time.Date(2026, 11, 28, 17, 5, 9, 0, time.UTC)
	tests := []struct {
		name     string
		modified int64
		want     string
	}{
		{name: "recorded before now", modified: now.Add(-90*time.Second).UnixMilli() + 999, want: "Sat, 28 Nov 2026 17:03:39 GMT"},
		{name: "recorded this second", modified: now.UnixMilli(), want: "Sat, 28 Nov 2026 17:05:09 GMT"},
		{name: "ahead of the clock", modified: now.Add(time.Second).UnixMilli()},
		{name: "unknown", modified: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := record{revision: 1, id: 1, firmID: 1, no: 1, kind: kindActive, etag: []byte(`"e"`), body: []byte(`{}`),
				freshUntil: now.Add(time.Hour).UnixMilli(), modified: tt.modified}
			f := newFront(1<<20, time.Hour)
			f.enable()
			f.keep(ByID(1), r, f.generation(), now)
			m := newMemory(1<<20, "")
			m.now = func() time.Time { return now }
			m.set(ByID(1).name(""), r, time.Hour)
			for tier, l := range map[string]localTier{"front": f, "memory": m} {
				got, ok := l.lookup(ByID(1), now)
				if !ok {
					t.Fatalf("%s: nothing kept", tier)
				}
				if string(got.date) != tt.want || string(got.entry(Hit).LastModifiedDate) != tt.want {
					t.Errorf("%s: date %q; want %q", tier, got.date, tt.want)
				}
			}
		})
	}
}

// TestFlightsAreSharedOnlyWhileWritesAreHeard: a gateway that does not hear
// other gateways' writes (its subscription is down) joins no flight under
// way, since the flight may have read a version that a write, unannounced
// here, replaced before the caller arrived; it reads again after it.
func TestFlightsAreSharedOnlyWhileWritesAreHeard(t *testing.T) {
	ctx := context.Background()
	src := newSource(listing(5, 1, 1, true))
	rdb, prefix := redisFor(t)
	deaf := must(t)(NewRedis(rdb, testRedisTimeout, testConfig(), testDeps(src, prefix))) // not Run: no subscription
	writer := must(t)(NewRedis(rdb, testRedisTimeout, testConfig(), testDeps(src, prefix)))
	current := src.listings[5]
	src.gate = make(chan struct{})
	first := make(chan Entry, 1)
	go func() {
		e, err := deaf.Get(ctx, ByID(5))
		if err != nil {
			t.Error(err)
		}
		first <- e
	}()
	testenv.WaitFor(t, func() bool { return src.looked.Load() == 1 }) // the flight holds revision 1
	next := current
	next.Title = "replaced"
	w, err := writer.Replace(ctx, current, next, upstream.Precondition{})
	if err != nil {
		t.Fatal(err)
	}
	second := make(chan Entry, 1)
	go func() {
		e, err := deaf.Get(ctx, ByID(5))
		if err != nil {
			t.Error(err)
		}
		second <- e
	}()
	testenv.WaitFor(t, func() bool { return src.calls.Load() >= 1 })
	time.Sleep(20 * time.Millisecond) // give a wrong join its chance
	close(src.gate)
	if e := <-first; e.revision != current.Revision {
		t.Fatalf("first read: revision %d; want %d, read before the write", e.revision, current.Revision)
	}
	if e := <-second; e.revision != w.Listing.Revision {
		t.Fatalf("read sent after the write returned: revision %d (%s); want %d", e.revision, e.State, w.Listing.Revision)
	}
}
