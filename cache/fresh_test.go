package cache

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/realty-gateway/gateway/internal/testenv"
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
