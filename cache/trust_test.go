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

// TestRedisTrustedOnlyWhenTheFeedVouches: a gateway serves no Redis entry
// until the feed adopted this Redis and applied everything up to then;
// while the last changes wait, only their keys go to the store.
func TestRedisTrustedOnlyWhenTheFeedVouches(t *testing.T) {
	ctx := context.Background()
	src := newSource(listing(1, 7, 3, true), listing(2, 7, 4, true))
	rdb, prefix := redisFor(t)
	cfg := testConfig()
	cfg.LocalBytes = 0 // every read looks at Redis
	warm := must(t)(NewRedis(rdb, testRedisTimeout, cfg, testDeps(src, prefix)))
	for _, k := range []Key{ByID(1), ByID(2)} {
		if _, err := warm.Get(ctx, k, coding.Identity, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	identity, err := warm.RedisIdentity(ctx)
	if err != nil || identity == "" {
		t.Fatalf("RedisIdentity = %q, %v", identity, err)
	}

	fv := &feedView{settled: map[string][]upstream.Settled{}, position: upstream.FeedPosition{RedisIdentity: "another redis", LastSeq: 10}}
	c := must(t)(NewRedis(rdb, testRedisTimeout, cfg, testDeps(src, prefix), WithFeed(fv)))
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	wg.Go(func() { c.Run(runCtx) })

	served := func(k Key) State {
		t.Helper()
		e, err := c.Get(ctx, k, coding.Identity, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return e.State
	}
	time.Sleep(300 * time.Millisecond) // several verifications
	if got := served(ByID(1)); got != Miss || c.RedisTrusted() {
		t.Fatalf("Redis adopted by nobody: read %v, trusted %v; want a miss, not trusted", got, c.RedisTrusted())
	}

	// The feed adopted this Redis; one change up to the watermark waits.
	fv.set(func(f *feedView) {
		f.position.RedisIdentity = identity
		f.unapplied = []upstream.Change{{Seq: 9, ListingID: 2, FirmID: 7, No: 4}}
	})
	testenv.WaitFor(t, func() bool { return c.trust.state.Load() == partial })
	if got := served(ByID(1)); got != Hit {
		t.Fatalf("key without a pending change read %v; want a Redis hit", got)
	}
	for _, k := range []Key{ByID(2), ByNumber(7, 4)} {
		if got := served(k); got != Miss {
			t.Fatalf("key %+v with a pending change read %v; want the store", k, got)
		}
	}
	fv.set(func(f *feedView) { f.caughtUp = true })
	testenv.WaitFor(t, c.RedisTrusted)
	if got := served(ByID(2)); got != Hit {
		t.Fatalf("after the feed caught up: %v; want a Redis hit", got)
	}

	// A write published while trusted is settled with this Redis's identity.
	w, err := c.Replace(ctx, src.listings[1], listing(1, 7, 3, true), upstream.Precondition{})
	if err != nil {
		t.Fatal(err)
	}
	c.Settle(w)
	testenv.WaitFor(t, func() bool {
		fv.mu.Lock()
		defer fv.mu.Unlock()
		return len(fv.settled[identity]) == 1
	})
	if got := fv.settled[identity][0]; got != (upstream.Settled{ID: 1, Revision: 2}) {
		t.Fatalf("settled %+v; want listing 1 at revision 2", got)
	}
}

// TestRedisDistrustedOnTrouble: an error of Redis ends trust at once; it
// comes back only through the feed, and a write made meanwhile is not
// settled by its writer.
func TestRedisDistrustedOnTrouble(t *testing.T) {
	ctx := context.Background()
	src := newSource(listing(1, 7, 3, true))
	_, prefix := redisFor(t) // removes the test's keys at the end
	var down atomic.Bool
	rdb := cutOffRedis(t, &down)
	cfg := testConfig()
	cfg.LocalBytes = 0
	id, err := redisIdentity(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	fv := &feedView{settled: map[string][]upstream.Settled{}, position: upstream.FeedPosition{RedisIdentity: id}, caughtUp: true}
	c := must(t)(NewRedis(rdb, testRedisTimeout, cfg, testDeps(src, prefix), WithFeed(fv)))
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	wg.Go(func() { c.Run(runCtx) })
	testenv.WaitFor(t, c.RedisTrusted)

	down.Store(true)
	if _, err := c.Get(ctx, ByID(1), coding.Identity, time.Now()); err != nil { // Redis fails: the store answers
		t.Fatal(err)
	}
	if c.RedisTrusted() {
		t.Fatal("still trusted after Redis failed")
	}
	w, err := c.Replace(ctx, src.listings[1], listing(1, 7, 3, true), upstream.Precondition{})
	if err != nil {
		t.Fatal(err)
	}
	c.Settle(w)
	down.Store(false)
	testenv.WaitFor(t, c.RedisTrusted)
	time.Sleep(50 * time.Millisecond) // the settler's turn
	fv.mu.Lock()
	defer fv.mu.Unlock()
	if len(fv.settled) != 0 {
		t.Fatalf("settled %v; want nothing: the write did not reach Redis", fv.settled)
	}
}
