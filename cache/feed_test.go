package cache

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/coding"
	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/upstream"
)

// stored reads what Redis holds under a listing's key.
func stored(t *testing.T, rdb *redis.Client, name string) (record, bool) {
	t.Helper()
	b, err := rdb.Get(context.Background(), name).Bytes()
	if errors.Is(err, redis.Nil) {
		return record{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeRecord(b)
	if err != nil {
		t.Fatalf("%s holds %q: %v", name, b, err)
	}
	return r, true
}

func live(l upstream.Listing) Update {
	l.Normalize()
	return Update{State: upstream.ListingState{Listing: l}, Revision: l.Revision, Numbers: []Key{ByNumber(l.FirmID, l.No)}}
}

func requireApplied(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("change %d not applied: %v", i, err)
		}
	}
}

// TestApplyRefreshesWhatIsCached: a cached copy (and a cached absence) is
// replaced by the new version; a key that holds nothing gets a floor,
// which a read of the old version in flight cannot fill past, while a
// read of the new one can.
func TestApplyRefreshesWhatIsCached(t *testing.T) {
	ctx := context.Background()
	old := listing(1, 7, 3, true)
	src := newSource(old)
	c, rdb, prefix := newRedisCache(t, src)
	if _, err := c.Get(ctx, ByID(1), coding.Identity, time.Now()); err != nil { // both keys cached at revision 1
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, ByNumber(7, 99), coding.Identity, time.Now()); !errors.Is(err, upstream.ErrNotFound) { // a cached absence
		t.Fatal(err)
	}

	next := listing(1, 7, 3, true)
	next.Title, next.Revision = "changed elsewhere", 2
	moved := listing(2, 7, 99, true) // listing 2 was inserted as number 99 behind the gateway
	requireApplied(t, c.Apply(ctx, []Update{live(next), live(moved)}))

	for _, name := range []string{prefix + "realty:id:1", prefix + "realty:listing:7-3"} {
		r, ok := stored(t, rdb, name)
		if !ok || r.revision != 2 || r.kind != kindActive || !strings.Contains(string(r.body), "changed elsewhere") {
			t.Fatalf("%s = %+v; want revision 2 with the new title", name, r)
		}
	}
	if r, ok := stored(t, rdb, prefix+"realty:listing:7-99"); !ok || r.kind != kindActive || r.id != 2 {
		t.Fatalf("the cached absence of 7-99 = %+v; want listing 2", r)
	}
	floor, ok := stored(t, rdb, prefix+"realty:id:2")
	if !ok || floor.kind != kindFloor || floor.revision != 1 {
		t.Fatalf("the uncached id key of listing 2 = %+v, %v; want a floor at revision 1", floor, ok)
	}
	if ttl := rdb.PTTL(ctx, prefix+"realty:id:2").Val(); ttl <= 0 || ttl > 2*c.loadTimeout {
		t.Fatalf("floor TTL %v; want at most %v", ttl, 2*c.loadTimeout)
	}

	// A fill of an older version is refused by the floor; the floor is a miss.
	stale := listing(2, 7, 99, true)
	stale.Revision = 0
	r, err := c.recordOf(stale)
	if err != nil {
		t.Fatal(err)
	}
	c.remember(ctx, r, time.Minute, nil, ByID(2))
	if r, _ := stored(t, rdb, prefix+"realty:id:2"); r.kind != kindFloor {
		t.Fatalf("after an older fill the key holds %+v; want the floor", r)
	}
	src.listings[2] = moved
	before := src.calls.Load()
	if e, err := c.Get(ctx, ByID(2), coding.Identity, time.Now()); err != nil || e.State != Miss || src.calls.Load() != before+1 {
		t.Fatalf("Get(2) over a floor = %+v, %v, %d store calls; want a miss from the store", e, err, src.calls.Load()-before)
	}
	if r, _ := stored(t, rdb, prefix+"realty:id:2"); r.kind != kindActive || r.revision != 1 {
		t.Fatalf("after the miss the key holds %+v; want the listing", r)
	}
}

// TestApplyDeletesAndMoves: a tombstone answers "not found" without the
// store; a number the listing left, and a removed row's keys, get floors.
func TestApplyDeletesAndMoves(t *testing.T) {
	ctx := context.Background()
	a, b := listing(1, 7, 3, true), listing(2, 7, 4, true)
	src := newSource(a, b)
	c, rdb, prefix := newRedisCache(t, src)
	for _, k := range []Key{ByID(1), ByID(2), ByNumber(7, 4)} {
		if _, err := c.Get(ctx, k, coding.Identity, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	tomb := Update{State: upstream.ListingState{Listing: upstream.Listing{ID: 1, FirmID: 7, No: 3, Revision: 2}, Deleted: true}, Revision: 2}
	movedB := listing(2, 8, 40, true) // moved to firm 8, number 40
	movedB.Revision = 2
	mv := live(movedB)
	mv.Numbers = append(mv.Numbers, ByNumber(7, 4))
	gone := Update{State: upstream.ListingState{Listing: upstream.Listing{ID: 5}, Gone: true}, Revision: 9, Numbers: []Key{ByNumber(7, 5)}}
	requireApplied(t, c.Apply(ctx, []Update{tomb, mv, gone}))

	delete(src.listings, 1)
	before := src.calls.Load()
	for _, k := range []Key{ByID(1), ByNumber(7, 3)} {
		if _, err := c.Get(ctx, k, coding.Identity, time.Now()); !errors.Is(err, upstream.ErrNotFound) {
			t.Fatalf("Get(%+v) after the delete: %v; want ErrNotFound", k, err)
		}
	}
	if n := src.calls.Load() - before; n != 0 {
		t.Fatalf("%d store calls; want the tombstone to answer", n)
	}
	for name, rev := range map[string]int64{prefix + "realty:listing:7-4": 2, prefix + "realty:id:5": 9, prefix + "realty:listing:7-5": 9} {
		if r, ok := stored(t, rdb, name); !ok || r.kind != kindFloor || r.revision != rev {
			t.Fatalf("%s = %+v, %v; want a floor at revision %d", name, r, ok, rev)
		}
	}
	if r, ok := stored(t, rdb, prefix+"realty:id:2"); !ok || r.no != 40 || r.firmID != 8 {
		t.Fatalf("id key of the moved listing = %+v; want firm 8, number 40", r)
	}
}

// TestApplyTellsOtherGateways: another gateway's local tier drops the old
// version before Apply returns, as for a write of this gateway's.
func TestApplyTellsOtherGateways(t *testing.T) {
	ctx := context.Background()
	src := newSource(listing(1, 7, 3, true))
	rdb, prefix := redisFor(t)
	consumer := must(t)(NewRedis(rdb, testRedisTimeout, testConfig(), testDeps(src, prefix)))
	other := must(t)(NewRedis(rdb, testRedisTimeout, testConfig(), testDeps(src, prefix)))
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	for _, c := range []*Cache{consumer, other} {
		wg.Go(func() { c.Run(runCtx) })
		<-c.Subscribed()
	}
	if _, err := other.Get(ctx, ByID(1), coding.Identity, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, ok := other.cachedAt(ByID(1), time.Now()); !ok {
		t.Fatal("the other gateway's local tier does not hold the listing")
	}
	next := listing(1, 7, 3, true)
	next.Title, next.Revision = "new", 2
	requireApplied(t, consumer.Apply(ctx, []Update{live(next)}))
	if e, ok := other.cachedAt(ByID(1), time.Now()); ok {
		t.Fatalf("the other gateway's local tier still holds %s", e.Body)
	}
	if s := consumer.Stats(); s.Announced != 1 || s.Unacknowledged != 0 {
		t.Fatalf("stats %+v; want one announcement, acknowledged", s)
	}
}

// TestApplyLocalTier: without Redis the process's own tier is brought up
// to date the same way.
func TestApplyLocalTier(t *testing.T) {
	ctx := context.Background()
	src := newSource(listing(1, 7, 3, true))
	c := must(t)(NewLocal(testConfig(), testDeps(src, "")))
	if _, err := c.Get(ctx, ByID(1), coding.Identity, time.Now()); err != nil {
		t.Fatal(err)
	}
	next := listing(1, 7, 3, true)
	next.Title, next.Revision = "local change", 2
	requireApplied(t, c.Apply(ctx, []Update{live(next)}))
	e, ok := c.cachedAt(ByID(1), time.Now())
	if !ok || !strings.Contains(string(e.Body), "local change") {
		t.Fatalf("cachedAt(1) = %s, %v; want the new version", e.Body, ok)
	}
	if _, ok := c.cachedAt(ByID(2), time.Now()); ok {
		t.Fatal("a floor answered as a listing")
	}
}

// feedView is a stand-in for the store's change feed.
type feedView struct {
	mu        sync.Mutex
	position  upstream.FeedPosition
	unapplied []upstream.Change
	caughtUp  bool
	settled   map[string][]upstream.Settled
}

func (f *feedView) Position(context.Context) (upstream.FeedPosition, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.position, nil
}

func (f *feedView) Unapplied(context.Context, int64, int) ([]upstream.Change, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.unapplied, nil
}

func (f *feedView) CaughtUp(context.Context, int64) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.caughtUp, nil
}

// Applied: nothing of the listing is among the unapplied changes.
func (f *feedView) Applied(_ context.Context, id, revision int64) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ch := range f.unapplied {
		if ch.ListingID == id && ch.Revision <= revision {
			return false, nil
		}
	}
	return true, nil
}

func (f *feedView) Settle(_ context.Context, identity string, vs []upstream.Settled) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settled[identity] = append(f.settled[identity], vs...)
	return nil
}

func (f *feedView) set(fn func(f *feedView)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// cutOff is a connection that fails every read and write while down.
type cutOff struct {
	net.Conn
	down *atomic.Bool
}

func (c cutOff) Read(b []byte) (int, error) {
	if c.down.Load() {
		return 0, errors.New("redis cut off")
	}
	return c.Conn.Read(b)
}

func (c cutOff) Write(b []byte) (int, error) {
	if c.down.Load() {
		return 0, errors.New("redis cut off")
	}
	return c.Conn.Write(b)
}

// cutOffRedis is a client of the test Redis whose connections, old and
// new, fail while down is set. One dial per attempt: go-redis's default of
// five, 100 ms apart, made each operation cost 0.4 s while cut off, and a
// write's four of them sometimes outlasted its test's wait.
func cutOffRedis(t *testing.T, down *atomic.Bool) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if down.Load() {
				return nil, errors.New("redis cut off")
			}
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			return cutOff{conn, down}, err
		}})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// TestUnpublishedWriteWaitsForTheFeed: a write that Redis failed does not
// return until the change feed has applied it (another gateway that trusts
// Redis would serve the old version meanwhile), and returns after
// UnpublishedWait when the feed never does.
func TestUnpublishedWriteWaitsForTheFeed(t *testing.T) {
	ctx := context.Background()
	src := newSource(listing(1, 7, 3, true))
	_, prefix := redisFor(t)
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
	replace := func(revision int64) <-chan error {
		fv.set(func(f *feedView) {
			f.unapplied = []upstream.Change{{Seq: revision, ListingID: 1, FirmID: 7, No: 3, Revision: revision}}
		})
		done := make(chan error, 1)
		go func() {
			_, err := c.Replace(ctx, src.listings[1], listing(1, 7, 3, true), upstream.Precondition{})
			done <- err
		}()
		return done
	}

	done := replace(2)
	select {
	case err := <-done:
		t.Fatalf("the write returned (%v) before the feed applied it", err)
	case <-time.After(300 * time.Millisecond):
	}
	fv.set(func(f *feedView) { f.unapplied = nil })
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testenv.Patience()):
		t.Fatal("the write did not return once the feed applied it")
	}

	start := time.Now()
	if err := <-replace(3); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < UnpublishedWait {
		t.Fatalf("the write returned after %v with its change unapplied; want %v", waited, UnpublishedWait)
	}
}
