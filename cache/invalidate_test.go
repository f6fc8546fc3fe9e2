package cache

import (
	"context"
	"os"
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

// TestSubscriptionLivenessTellsAStarvedProcessFromALostSubscription: a
// process starved of CPU wakes after its read deadline while the answer to
// its ping waits in the socket; its subscription is not lost, and its local
// tier stays on. A subscription that answers nothing is lost in time.
func TestSubscriptionLivenessTellsAStarvedProcessFromALostSubscription(t *testing.T) {
	tests := []struct {
		name     string
		deaf     bool // every read after the first ping finds nothing
		wantLost bool
	}{
		{name: "starved: woken late once, the pong waiting", wantLost: false},
		{name: "silent: nothing ever answers", deaf: true, wantLost: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rdb, prefix := redisFor(t)
			cfg := testConfig()
			cfg.LocalMaxAge = time.Minute // the tier holds its entry, and pings, throughout
			c := must(t)(NewRedis(rdb, testRedisTimeout, cfg, testDeps(newSource(listing(5, 1, 1, true)), prefix)))
			// The starved read is the one after a ping: it wakes past its
			// deadline, as late as the check that calls a ping unanswered.
			var lastTimedOut, stalled atomic.Bool
			var afterStall atomic.Int64
			real := c.inv.receive
			c.inv.receive = func(ctx context.Context, ps *redis.PubSub, d time.Duration) (any, error) {
				if !c.front.holds(time.Now()) { // before the tier holds an entry, no ping goes out
					return real(ctx, ps, d)
				}
				if tt.deaf {
					time.Sleep(d)
					return nil, os.ErrDeadlineExceeded
				}
				if lastTimedOut.Load() && !stalled.Swap(true) {
					time.Sleep(2*healthEvery + 200*time.Millisecond)
					return nil, os.ErrDeadlineExceeded
				}
				if stalled.Load() {
					afterStall.Add(1)
				}
				msg, err := real(ctx, ps, d)
				lastTimedOut.Store(err != nil)
				return msg, err
			}
			running(t, c)
			if _, err := c.Get(context.Background(), ByID(5), coding.Identity, time.Now()); err != nil {
				t.Fatal(err)
			}
			gen := c.front.generation()
			if !c.front.holds(time.Now()) {
				t.Fatal("the local tier holds nothing: no ping would go out")
			}
			if tt.wantLost {
				testenv.Eventually(t, "the silent subscription is lost", func() bool { return c.front.generation() != gen })
				return
			}
			testenv.Eventually(t, "a read after the stall, or the subscription lost", func() bool {
				return afterStall.Load() >= 1 || c.front.generation() != gen
			})
			time.Sleep(2 * confirmWait)
			if g := c.front.generation(); g != gen || !c.front.serving() {
				t.Fatalf("local tier generation %d → %d, serving %v: the starved process called its subscription lost", gen, g, c.front.serving())
			}
		})
	}
}

// TestAWriteOutwaitsASlowAcknowledgement: a gateway that holds a listing
// in its local tier hears a write's announcement only after the write
// stopped waiting for it (a starved process). With the wait at the local
// tier's max age (the default), its copy has aged out by then, and it
// reads the new version; with a shorter wait it serves the replaced one,
// the trade-off that the setting documents.
func TestAWriteOutwaitsASlowAcknowledgement(t *testing.T) {
	tests := []struct {
		name         string
		maxAge, wait time.Duration
		wantRevision int64
	}{
		{name: "wait at the max age", maxAge: time.Second, wait: time.Second, wantRevision: 2},
		{name: "wait below the max age", maxAge: 10 * time.Second, wait: 50 * time.Millisecond, wantRevision: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rdb, prefix := redisFor(t)
			src := newSource(listing(5, 1, 1, true))
			cfg := testConfig()
			cfg.LocalMaxAge, cfg.InvalidationWait = tt.maxAge, tt.wait
			writer := running(t, must(t)(NewRedis(rdb, testRedisTimeout, cfg, testDeps(src, prefix))))
			slow := must(t)(NewRedis(rdb, testRedisTimeout, cfg, testDeps(src, prefix)))
			// The writer's announcement reaches the slow gateway, which
			// handles it only once the test has read after the write.
			real := slow.inv.receive
			readAfterWrite := make(chan struct{})
			var once sync.Once
			t.Cleanup(func() { once.Do(func() { close(readAfterWrite) }) })
			slow.inv.receive = func(ctx context.Context, ps *redis.PubSub, d time.Duration) (any, error) {
				msg, err := real(ctx, ps, d)
				if m, ok := msg.(*redis.Message); ok && m.Channel == slow.inv.events && strings.Contains(m.Payload, writer.inv.acks) {
					<-readAfterWrite
				}
				return msg, err
			}
			running(t, slow)
			ctx := context.Background()
			if e, err := slow.Get(ctx, ByID(5), coding.Identity, time.Now()); err != nil || e.revision != 1 {
				t.Fatalf("first read: %v, %v", e.revision, err)
			}
			if _, ok := slow.cachedAt(ByID(5), time.Now()); !ok {
				t.Fatal("the slow gateway keeps no local copy")
			}
			if _, err := writer.Replace(ctx, src.listings[5], listing(5, 1, 1, true), upstream.Precondition{}); err != nil {
				t.Fatal(err)
			}
			e, err := slow.Get(ctx, ByID(5), coding.Identity, time.Now())
			once.Do(func() { close(readAfterWrite) })
			if err != nil || e.revision != tt.wantRevision {
				t.Fatalf("read after the write returned: revision %d, %v; want %d", e.revision, err, tt.wantRevision)
			}
			if n := writer.inv.unacknowledged.Load(); n != 1 {
				t.Fatalf("%d writes unacknowledged; want the one the slow gateway held", n)
			}
		})
	}
}

// TestALocalCopyAgesFromTheStartOfItsRead: a copy that a slow read brings
// expires the max age after the read began, not after it ended: a write
// announced meanwhile, and heard late, waits only the max age.
func TestALocalCopyAgesFromTheStartOfItsRead(t *testing.T) {
	const maxAge = time.Minute
	rdb, prefix := redisFor(t)
	src := newSource(listing(5, 1, 1, true))
	src.gate = make(chan struct{})
	cfg := testConfig()
	cfg.LocalMaxAge = maxAge
	c := running(t, must(t)(NewRedis(rdb, testRedisTimeout, cfg, testDeps(src, prefix))))
	done := make(chan error, 1)
	go func() {
		_, err := c.Get(context.Background(), ByID(5), coding.Identity, time.Now())
		done <- err
	}()
	testenv.WaitFor(t, func() bool { return src.looked.Load() == 1 })
	inRead := time.Now() // the read began before this
	time.Sleep(300 * time.Millisecond)
	close(src.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, ok := c.cachedAt(ByID(5), inRead); !ok {
		t.Fatal("the read's copy was not kept")
	}
	if _, ok := c.cachedAt(ByID(5), inRead.Add(maxAge)); ok {
		t.Fatal("the copy is served a max age after its read began: it ages from when the read ended")
	}
}
