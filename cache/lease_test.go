package cache

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/coding"
	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/upstream"
)

// fleet is n gateways' caches over one Redis prefix and one store, each
// subscribed as a serving gateway is.
func fleet(t *testing.T, n int, src *source) []*Cache {
	rdb, prefix := redisFor(t)
	cs := make([]*Cache, n)
	for i := range cs {
		cs[i] = running(t, must(t)(NewRedis(rdb, testRedisTimeout, testConfig(), testDeps(src, prefix))))
	}
	return cs
}

// TestColdKeyIsLoadedOnceForTheFleet: four gateways miss the same cold
// key at once; one of them holds the lease and reads the store, and the
// others answer from its fill.
func TestColdKeyIsLoadedOnceForTheFleet(t *testing.T) {
	src := newSource(listing(5, 1, 1, true))
	src.gate = make(chan struct{})
	cs := fleet(t, 4, src)
	var wg sync.WaitGroup
	got := make([]Entry, len(cs))
	for i, c := range cs {
		wg.Go(func() {
			e, err := c.Get(context.Background(), ByID(5), coding.Identity, time.Now())
			if err != nil {
				t.Errorf("gateway %d: %v", i, err)
			}
			got[i] = e
		})
	}
	testenv.WaitFor(t, func() bool { return src.looked.Load() >= 1 })
	testenv.Eventually(t, "the three others waiting on the holder's lease", func() bool {
		waiting := 0
		for _, c := range cs {
			c.inv.mu.Lock()
			waiting += len(c.inv.fills)
			c.inv.mu.Unlock()
		}
		return waiting == 3
	})
	close(src.gate)
	wg.Wait()
	if n := src.calls.Load(); n != 1 {
		t.Fatalf("%d store reads for one cold key on four gateways; want 1", n)
	}
	var coalesced uint64
	collapsed := 0
	for i, c := range cs {
		if got[i].ID != 5 || got[i].revision != 1 || got[i].State != Miss {
			t.Errorf("gateway %d answered %+v", i, got[i])
		}
		if got[i].Collapsed {
			collapsed++
		}
		coalesced += c.Stats().Coalesced
	}
	if coalesced != 3 || collapsed != 3 {
		t.Fatalf("%d reads counted and %d marked as answered by another gateway's load; want 3", coalesced, collapsed)
	}
}

// TestLeaseOfADeadHolderIsTakenOver: a lease whose holder died (nobody
// releases it) expires, and a waiter takes it over and loads; nothing
// waits past the load timeout.
func TestLeaseOfADeadHolderIsTakenOver(t *testing.T) {
	src := newSource(listing(5, 1, 1, true))
	cs := fleet(t, 1, src)
	c := cs[0]
	rdb := redisOf(c).rdb
	lease := leaseKey(ByID(5).name(c.prefix))
	if err := rdb.Set(context.Background(), lease, "dead-holder", 300*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e, err := c.Get(context.Background(), ByID(5), coding.Identity, time.Now())
	if err != nil || e.ID != 5 || e.State != Miss {
		t.Fatalf("Get = %+v, %v; want a miss loaded here", e, err)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond || waited > c.loadTimeout+3*time.Second { // a busy machine's slack
		t.Fatalf("answered after %v; want after the dead holder's lease, within the load timeout", waited)
	}
	if n := src.calls.Load(); n != 1 {
		t.Fatalf("%d store reads; want 1", n)
	}
	testenv.Eventually(t, "the lease released", func() bool {
		n, err := rdb.Exists(context.Background(), lease).Result()
		return err == nil && n == 0
	})
}

// TestLeaseLivesInItsKeysSlot: a lease hashes to its key's Redis Cluster
// slot, with or without a hash tag in the key's prefix.
func TestLeaseLivesInItsKeysSlot(t *testing.T) {
	// hashTag is what Redis Cluster hashes: the first {…} that holds
	// something, else the whole key.
	hashTag := func(key string) string {
		if i := strings.IndexByte(key, '{'); i >= 0 {
			if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
				return key[i+1 : i+1+j]
			}
		}
		return key
	}
	for _, name := range []string{"realty:id:5", "gw:realty:listing:3-12", "{gw}:realty:id:5"} {
		if got, want := hashTag(leaseKey(name)), hashTag(name); got != want {
			t.Errorf("leaseKey(%q) = %q hashes %q; the key hashes %q", name, leaseKey(name), got, want)
		}
	}
	for _, name := range []string{"a{}b:realty:id:5", "a}b:realty:id:5"} { // no key shares their slot for certain
		if got := leaseKey(name); got != "" {
			t.Errorf("leaseKey(%q) = %q; want none", name, got)
		}
	}
}

// TestOnlyAWaitedForFillIsAnnounced: the fill of a lease that no other
// gateway waited for publishes nothing (a miss wakes no gateway); one that
// a gateway waited for is published once, with the key's name.
func TestOnlyAWaitedForFillIsAnnounced(t *testing.T) {
	ctx := context.Background()
	src := newSource(listing(5, 1, 1, true), listing(6, 1, 2, true))
	c := fleet(t, 1, src)[0]
	rdb := redisOf(c).rdb
	sub := subscribeFilled(t, c)
	if _, err := c.Get(ctx, ByID(5), coding.Identity, time.Now()); err != nil {
		t.Fatal(err)
	}
	if msg, err := sub.ReceiveTimeout(ctx, 300*time.Millisecond); err == nil {
		t.Fatalf("a fill nobody waited for was announced: %v", msg)
	}
	// Another gateway waits: its look marks the lease held here.
	waited := ByID(6).name(c.prefix)
	held, err := rdb.Set(ctx, leaseKey(waited), "other-1.", time.Minute).Result()
	if err != nil || held != "OK" {
		t.Fatal(held, err)
	}
	mine := &lease{name: waited, owner: "mine", seq: 1, state: leaseWanted}
	if _, err := redisOf(c).get(ctx, waited, mine); err != nil || mine.state != leaseHeldElsewhere {
		t.Fatalf("look at a leased key: lease %v, %v; want the lease left to its holder", mine.state, err)
	}
	theirs := &lease{name: waited, owner: "other", seq: 1, state: leaseHeld}
	c.remember(ctx, c.recordOfEncoded(mustEncode(t, src.listings[6])), time.Minute, theirs, ByID(6))
	if theirs.state != leaseNone {
		t.Fatalf("after its fill landed the lease is %v; want it ended", theirs.state)
	}
	msg, err := nextFilled(sub)
	if err != nil || msg.Payload != waited {
		t.Fatalf("announced %v, %v; want %q", msg, err, waited)
	}
}

// subscribeFilled subscribes to c's filled channel, as every gateway does,
// until the test ends.
func subscribeFilled(t *testing.T, c *Cache) *redis.PubSub {
	t.Helper()
	sub := redisOf(c).rdb.Subscribe(context.Background(), c.inv.filled)
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(context.Background()); err != nil { // the confirmation
		t.Fatal(err)
	}
	return sub
}

// nextFilled is the next key announced filled, within the test's patience.
func nextFilled(sub *redis.PubSub) (*redis.Message, error) {
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Patience())
	defer cancel()
	return sub.ReceiveMessage(ctx)
}

func mustEncode(t *testing.T, l upstream.Listing) upstream.Encoded {
	t.Helper()
	e, err := upstream.Encode(l)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestTheLeaseRidesOnTheLookWhileKeysAreColdOnly: while a gateway's looks
// at Redis mostly find keys empty, a cold key costs one round trip, the
// script that takes its lease; while they mostly find keys, a hit is a
// plain GET, which costs Redis a tenth of the script, and only a cold key
// pays the script after it.
func TestTheLeaseRidesOnTheLookWhileKeysAreColdOnly(t *testing.T) {
	const keys = 2 * coldLooksSpan
	var ls []upstream.Listing
	for i := range int64(keys + 2) {
		ls = append(ls, listing(100+i, 7, 1+i, true))
	}
	src := newSource(ls...)
	rdb, prefix := redisFor(t)
	trips := &roundTrips{}
	rdb.AddHook(trips)
	cfg := testConfig()
	cfg.LocalBytes = 0 // every read looks at Redis
	c := running(t, must(t)(NewRedis(rdb, testRedisTimeout, cfg, testDeps(src, prefix))))
	ctx := context.Background()
	// looks reads k and returns the looks at Redis that it sent, in order.
	looks := func(k Key, want State) []string {
		t.Helper()
		trips.mu.Lock()
		trips.commands, trips.scripts = nil, nil
		trips.mu.Unlock()
		if e, err := c.Get(ctx, k, coding.Identity, time.Now()); err != nil || e.State != want {
			t.Fatalf("Get %v = %v, %v; want %v", k, e.State, err, want)
		}
		trips.mu.Lock()
		defer trips.mu.Unlock()
		var sent []string
		for i, name := range trips.commands {
			switch {
			case name == "get":
				sent = append(sent, "GET")
			case name == "evalsha" && trips.scripts[i] == getOrLease.Hash():
				sent = append(sent, "getOrLease")
			}
		}
		return sent
	}
	for i := range int64(keys) { // cold keys: the lease rides on the look
		if got := looks(ByID(100+i), Miss); !slices.Equal(got, []string{"getOrLease"}) {
			t.Fatalf("cold key %d sent %v; want the script alone", i, got)
		}
	}
	for i := range int64(keys) { // now found: within the span, plain GETs
		got := looks(ByID(100+i), Hit)
		if i > coldLooksSpan && !slices.Equal(got, []string{"GET"}) {
			t.Fatalf("hit %d sent %v; want one GET", i, got)
		}
	}
	// A cold key among hits: the GET, then the script that takes its lease.
	if got := looks(ByID(100+keys), Miss); !slices.Equal(got, []string{"GET", "getOrLease"}) {
		t.Fatalf("cold key among hits sent %v; want GET, then the script", got)
	}
	if n, err := rdb.Exists(ctx, leaseKey(ByID(100+keys).name(prefix))).Result(); err != nil || n != 0 {
		t.Fatalf("the lease outlived its fill: %d, %v", n, err)
	}
	if n := src.calls.Load(); n != keys+1 {
		t.Fatalf("%d store reads; want %d", n, keys+1)
	}
}

// TestAWriteEndsTheLease: a write of a key, by this gateway or applied
// from the change feed, ends the lease another gateway holds on it and
// wakes the gateways that wait on it: the holder's fill would be older.
func TestAWriteEndsTheLease(t *testing.T) {
	ctx := context.Background()
	src := newSource(listing(5, 1, 1, true), listing(6, 1, 2, true))
	c := fleet(t, 1, src)[0]
	rdb := redisOf(c).rdb
	sub := subscribeFilled(t, c)
	next := listing(6, 1, 2, true)
	next.Title, next.Revision = "changed elsewhere", 2
	for _, tt := range []struct {
		name  string
		id    int64
		write func() error
	}{
		{"a write through the gateway", 5, func() error {
			_, err := c.Replace(ctx, src.listings[5], listing(5, 1, 1, true), upstream.Precondition{})
			return err
		}},
		{"a change from the feed", 6, func() error { return c.Apply(ctx, []Update{live(next)})[0] }},
	} {
		name := ByID(tt.id).name(c.prefix)
		if err := rdb.Set(ctx, leaseKey(name), "other-1.+", time.Minute).Err(); err != nil { // held elsewhere, waited for
			t.Fatal(err)
		}
		if err := tt.write(); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if n, err := rdb.Exists(ctx, leaseKey(name)).Result(); err != nil || n != 0 {
			t.Fatalf("%s: the lease outlived it (%d, %v)", tt.name, n, err)
		}
		msg, err := nextFilled(sub)
		if err != nil || msg.Payload != name {
			t.Fatalf("%s: announced %v, %v; want %q", tt.name, msg, err, name)
		}
	}
}

// TestAFrozenRedisIsNoLeaseHeldElsewhere: with Redis stopped (SIGSTOP, as
// a stalled fork or a blackholed network leaves it), a look that fails is
// not another gateway's lease: a cold read goes to the store after the
// Redis timeout, not after the load timeout spent waiting for a fill.
func TestAFrozenRedisIsNoLeaseHeldElsewhere(t *testing.T) {
	const (
		timeout = 100 * time.Millisecond // the gateway's default Redis timeout
		bound   = 10 * timeout           // ten times it: a busy machine's slack
	)
	node := testenv.StartRedis(t, "frozen")
	// As the gateway sets its client up (internal/platform.OpenRedis).
	rdb := redis.NewClient(&redis.Options{Addr: node.Addr, MaxRetries: 1, ContextTimeoutEnabled: true,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, PoolTimeout: timeout})
	t.Cleanup(func() { _ = rdb.Close() })
	var ls []upstream.Listing
	for id := range int64(21) {
		ls = append(ls, listing(id+1, 1, id+1, true))
	}
	src := newSource(ls...)
	deps := testDeps(src, "frozen:")
	deps.LoadTimeout = 2*time.Second + 3*timeout // the gateway's default: the store's timeout and three Redis operations
	c := running(t, must(t)(NewRedis(rdb, timeout, testConfig(), deps)))
	if _, err := c.Get(context.Background(), ByID(21), coding.Identity, time.Now()); err != nil { // the connections are up
		t.Fatal(err)
	}
	if !c.shareFlights() {
		t.Fatal("the cache takes no leases: the test would prove nothing")
	}
	node.Pause()
	t.Cleanup(node.Resume)
	for i := range int64(10) {
		for _, k := range []Key{ByID(i + 1), ByNumber(1, i+11)} {
			start := time.Now()
			e, err := c.Get(context.Background(), k, coding.Identity, time.Now())
			took := time.Since(start)
			if err != nil || e.State != Miss {
				t.Fatalf("read %d of %+v: %+v, %v; want a miss from the store", i+1, k, e, err)
			}
			if took > bound {
				t.Errorf("read %d of %+v took %v with Redis frozen; want at most %v", i+1, k, took, bound)
			}
		}
	}
}
