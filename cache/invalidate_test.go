package cache

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/testenv"
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
			if _, err := c.Get(context.Background(), ByID(5)); err != nil {
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
