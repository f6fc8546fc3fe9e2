package cache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A cold key costs the store one read for the whole fleet, not one per
// gateway (Facebook's memcache leases, NSDI '13): the flight that finds
// the key empty in Redis takes a lease on it there (SET NX PX), and only
// the holder reads the store and fills. A gateway that finds the lease
// taken waits for the fill: the holder's release publishes the key on the
// filled channel, which every gateway subscribes to beside the
// invalidations, and a waiter also looks again every leasePoll in case
// the message is lost. The waiter then answers from Redis, admitted as
// any copy is; the fill is version-guarded as every fill is, so a lease
// never lets an older version replace a newer one.
//
// Bounds: a lease lives the load timeout, the longest a holder's load
// can take, so a holder that died (kill -9, a partition) holds the key at
// most that long; a waiter that finds the lease gone and the key still
// empty takes it over. A waiter waits at most the load timeout, then loads
// by itself. While Redis is not trusted, or this process does not hear
// the other gateways, no lease is taken: coalescing is in-process only.

// leasePoll is how often a waiter looks at Redis without a message.
const leasePoll = 50 * time.Millisecond

// leaseKey names the lease of the key name, in name's Redis Cluster slot:
// name's own hash tag where it has one, else all of name as the tag. (A
// prefix with a brace but no tag cannot be wrapped: its leases hash
// elsewhere, which only their commands, all of one key, see.)
func leaseKey(name string) string {
	if strings.ContainsAny(name, "{}") {
		return name + ":lease"
	}
	return "{" + name + "}:lease"
}

// newLeaseToken names one lease, so that only its holder releases it.
func newLeaseToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // crypto/rand does not fail
	return hex.EncodeToString(b)
}

// releaseScript ends the lease KEYS[1] where it still holds the token
// ARGV[1], and publishes the filled key ARGV[3] on the channel ARGV[2] for
// the gateways that wait for it.
const releaseScript = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
`

// lease takes the lease on the cold key name for ttl: true where this
// process holds it now.
func (t *redisTier) lease(ctx context.Context, name, token string, ttl time.Duration) (bool, error) {
	b, err := t.do(ctx, func(ctx context.Context) ([]byte, error) {
		cmd := redis.NewStatusCmd(ctx, "set", leaseKey(name), token, "nx", "px", ttl.Milliseconds())
		var err error
		if t.pipe == nil {
			err = t.rdb.Process(ctx, cmd)
		} else {
			err = t.pipe.Submit(ctx, cmd).WaitContext(ctx)
		}
		switch {
		case errors.Is(err, redis.Nil):
			return nil, nil
		case err != nil:
			return nil, err
		}
		return []byte{1}, nil
	})
	return b != nil, err
}

// release ends this process's lease on name and tells the waiting gateways
// that name was filled. Best effort, without waiting, after the fill
// returned: the fill is in Redis before the message. A lost release costs
// the waiters their poll, or the lease its expiry.
func (t *redisTier) release(name, token string) {
	if t.pipe == nil {
		return // the lease expires; the waiters poll
	}
	ctx := context.Background()
	cmd := redis.NewCmd(ctx, "eval", releaseScript, 1, leaseKey(name), token, t.filled, name)
	cmd.SetFirstKeyPos(3) // the lease's slot, on a cluster
	t.pipe.Submit(ctx, cmd)
}

// lease and release without Redis: every process holds its own keys.
func (m *memory) lease(context.Context, string, string, time.Duration) (bool, error) {
	return true, nil
}

func (m *memory) release(string, string) {}

// leased is the outcome of a cold key's lease: the copy another
// gateway's fill left, or the token under which this process loads.
type leased struct {
	r     record
	v     verdict // coalesced or absent where another gateway filled the key; else missing
	token string  // this process holds the lease: it loads and releases
}

// leaseOrWait takes the fleet's lease on the cold key k, or waits, at most
// the load timeout, for its holder's fill. It returns what to do next:
// answer from the copy found, or load (with the token where the lease is
// this process's).
func (c *Cache) leaseOrWait(ctx context.Context, k Key, name string) leased {
	if c.inv == nil || !c.shareFlights() {
		return leased{v: missing} // no fleet without Redis; no lease while Redis may miss writes or this process hears nothing
	}
	token := newLeaseToken()
	ctx, cancel := context.WithTimeout(ctx, c.loadTimeout)
	defer cancel()
	for {
		held, err := c.shared.lease(ctx, name, token, c.loadTimeout)
		switch {
		case err != nil:
			return leased{v: missing}
		case held:
			return leased{v: missing, token: token}
		}
		filled, stop := c.inv.watchFill(name)
		announced := false
		select {
		case <-filled:
			announced = true
		case <-time.After(leasePoll):
		case <-ctx.Done():
		}
		stop()
		if ctx.Err() != nil {
			return leased{v: missing} // the holder took too long: load as before
		}
		r, v := c.readShared(ctx, k, name)
		switch {
		case v == admitted || v == absent:
			c.counts.coalesced.Add(1)
			if v == admitted {
				v = coalesced
			}
			return leased{r: r, v: v}
		case v != missing, announced:
			// Not servable, or released without a fill (the holder's
			// store failed): load as before, not one gateway after another.
			return leased{v: missing}
		}
		// Still cold without a word: the lease again, which a dead
		// holder's expiry frees, or its holder's fill.
	}
}
