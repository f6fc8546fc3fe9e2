package cache

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

// Redis may miss writes: an outage during which writes returned, a
// failover to a replica that lagged, a restart from an older snapshot. The
// store's change feed is the durable record of what Redis missed: a change
// stays unapplied until the consumer has applied it to the Redis that the
// feed has adopted (and a new Redis makes the consumer apply the retained
// window again). So a gateway trusts Redis entries only while nothing
// suggests that Redis missed something: from its start, and from every
// sign of trouble (an error of the tier, a lost subscription, a new Redis
// identity), it serves no Redis entry until it has verified that the feed
// adopted the Redis it talks to and applied every change recorded up to
// that moment. While it waits for the last changes, it distrusts only
// their keys: they are suspects, held in doubt by their floors (floors.go).

// FeedView is what the cache reads of the store's change feed.
type FeedView interface {
	Position(ctx context.Context) (upstream.FeedPosition, error)
	Unapplied(ctx context.Context, upTo int64, limit int) ([]upstream.Change, error)
	CaughtUp(ctx context.Context, upTo int64) (bool, error)
	Applied(ctx context.Context, listingID, revision int64) (bool, error)
	Settle(ctx context.Context, redisIdentity string, versions []upstream.Settled) error
}

// Trust states.
const (
	trusted int32 = iota
	distrusted
	partial // trusted but for the suspects' keys
)

// distrustLimit bounds the keys a gateway distrusts one by one; past it, it
// distrusts Redis whole until the feed has caught up.
const distrustLimit = 100_000

// trust gates Redis entries. The read path takes one atomic load.
type trust struct {
	feed FeedView
	// redisIdentity names the Redis behind the tier; timeout bounds each
	// call to the feed.
	redisIdentity func(ctx context.Context) (string, error)
	timeout       time.Duration
	log           *slog.Logger
	state         atomic.Int32
	floors        *floors
	// epoch is raised by every distrust, so that a verification that
	// began before it does not end in trust.
	epoch    atomic.Uint64
	identity atomic.Pointer[string] // of the Redis last verified
	kick     chan struct{}
}

func newTrust(feed FeedView, redisIdentity func(context.Context) (string, error), timeout time.Duration, fl *floors, log *slog.Logger) *trust {
	t := &trust{feed: feed, redisIdentity: redisIdentity, timeout: timeout, floors: fl, log: log, kick: make(chan struct{}, 1)}
	t.state.Store(distrusted) // nothing is known of Redis yet
	return t
}

// allows reports whether Redis entries may be served: the suspects' keys
// are refused by their floors.
func (t *trust) allows() bool {
	return t == nil || t.state.Load() != distrusted
}

// distrust stops serving Redis entries until the next verification.
func (t *trust) distrust() {
	if t == nil {
		return
	}
	t.epoch.Add(1)
	if t.state.Swap(distrusted) != distrusted {
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
}

// RedisTrusted reports whether this gateway serves Redis entries without
// a check: true without Redis or without a change feed.
func (c *Cache) RedisTrusted() bool {
	return c.trust == nil || c.trust.state.Load() == trusted
}

// identityEvery is how often a trusting gateway checks that Redis is the
// one it verified: a failover that broke none of its connections (a
// Cluster node it is idle on) is seen within this.
const identityEvery = time.Second

// verify runs until ctx ends: it checks Redis's identity while trusting,
// and verifies after every distrust.
func (t *trust) verify(ctx context.Context) {
	tick := time.NewTicker(identityEvery)
	defer tick.Stop()
	for ctx.Err() == nil {
		if t.state.Load() != trusted {
			if t.verifyOnce(ctx) {
				continue
			}
			select { // try again soon
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		select {
		case <-ctx.Done():
		case <-t.kick:
		case <-tick.C:
			id, err := t.redisIdentity(ctx)
			if err != nil || id != *t.identity.Load() {
				t.log.Info("redis changed or failing; its entries are not served until the change feed has caught up", "err", err)
				t.distrust()
			}
		}
	}
}

// verifyOnce tries to end a distrust; it reports whether it did.
func (t *trust) verifyOnce(ctx context.Context) bool {
	epoch := t.epoch.Load()
	id, err := t.redisIdentity(ctx)
	if err != nil {
		return false
	}
	pos, err := feedCall(ctx, t.timeout, func(ctx context.Context) (upstream.FeedPosition, error) { return t.feed.Position(ctx) })
	if err != nil || pos.RedisIdentity != id {
		return false // the consumer has not adopted this Redis yet
	}
	changes, err := feedCall(ctx, t.timeout, func(ctx context.Context) ([]upstream.Change, error) {
		return t.feed.Unapplied(ctx, pos.LastSeq, distrustLimit)
	})
	if err != nil {
		return false
	}
	if len(changes) < distrustLimit {
		suspects := make([]Key, 0, 3*len(changes))
		for _, ch := range changes {
			suspects = append(suspects, ByID(ch.ListingID), ByNumber(ch.FirmID, ch.No))
			if ch.Moved() {
				suspects = append(suspects, ByNumber(ch.OldFirmID, ch.OldNo))
			}
		}
		t.floors.suspects(suspects)
		if t.epoch.Load() == epoch {
			t.state.CompareAndSwap(distrusted, partial)
		}
	}
	for ctx.Err() == nil && t.epoch.Load() == epoch {
		caught, err := feedCall(ctx, t.timeout, func(ctx context.Context) (bool, error) { return t.feed.CaughtUp(ctx, pos.LastSeq) })
		if err == nil && caught {
			t.identity.Store(&id)
			t.floors.caughtUp()
			if t.state.CompareAndSwap(partial, trusted) || t.state.CompareAndSwap(distrusted, trusted) {
				t.log.Info("redis entries served again: the change feed has applied what it missed", "lastSeq", pos.LastSeq)
			}
			return t.epoch.Load() == epoch
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false
}

// feedCall runs one call to the store's feed within timeout.
func feedCall[T any](ctx context.Context, timeout time.Duration, call func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return call(ctx)
}

// RedisIdentity names the Redis behind the client: the run ids of its
// masters, which change with every restart and failover.
func (c *Cache) RedisIdentity(ctx context.Context) (string, error) {
	if c.redis == nil {
		return "", errNoRedis
	}
	return c.redis.identity(ctx)
}

// RedisEmpty reports whether Redis holds no key at all: then it cannot
// hold an old version of anything.
func (c *Cache) RedisEmpty(ctx context.Context) (bool, error) {
	if c.redis == nil {
		return false, errNoRedis
	}
	return c.redis.empty(ctx)
}

// trustedIdentity is the identity of the Redis this gateway verified, and
// whether it trusts it now. Without Redis or a feed it trusts its one tier.
func (c *Cache) trustedIdentity() (string, bool) {
	if c.trust == nil {
		return "", true
	}
	id := c.trust.identity.Load()
	if id == nil || c.trust.state.Load() != trusted {
		return "", false
	}
	return *id, true
}
