package cache

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/coding"
	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/upstream"
)

// TestQueuedFlightsNeverJoinALoadUnderWay: callers that arrive while a load
// runs share the next load, which begins only after the first ended.
func TestQueuedFlightsNeverJoinALoadUnderWay(t *testing.T) {
	var g queuedFlights
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
		e, err := deaf.Get(ctx, ByID(5), coding.Identity, time.Now())
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
		e, err := deaf.Get(ctx, ByID(5), coding.Identity, time.Now())
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
