package adminserver

import (
	"context"
	"sync/atomic"
	"time"
)

// Readiness decides /readyz. It is false:
//   - while draining;
//   - while the store and the shared cache tier both fail: nothing can be
//     served, not even stale (a failing store alone still serves cached
//     listings, and a gateway without Redis has only its own cache);
//   - while a new gateway warms up, until the change feed vouches for
//     Redis (cache/trust.go), at most warmUp: else a rolling deploy sends
//     the fleet's every read to the store.
//
// Under traffic the store's breaker is the evidence: closed, no check.
// Otherwise the store and Redis are asked, each within its timeout, so
// that a gateway out of rotation does not flap as its breaker turns
// half-open on its own.
type Readiness struct {
	draining     *atomic.Bool
	warming      func() bool                 // nil: never
	storeSuspect func() bool                 // the store's breaker is not closed
	pingStore    func(context.Context) error // within its own timeout
	pingCache    func(context.Context) error // nil without Redis
}

// Check returns the reason the gateway is not ready, or "".
func (r Readiness) Check(ctx context.Context) string {
	switch {
	case r.draining.Load():
		return "shutting down"
	case r.warming != nil && r.warming():
		return "warming up: Redis not yet vouched for by the change feed"
	case !r.storeSuspect() || r.pingStore(ctx) == nil || r.pingCache == nil || r.pingCache(ctx) == nil:
		return ""
	default:
		return "store and cache both failing"
	}
}

// warmUp bounds how long a starting gateway waits to trust Redis before it
// is ready anyway.
const warmUp = 5 * time.Second

// ReadinessDeps are what readiness asks of the components.
type ReadinessDeps struct {
	// RedisTrusted is the cache's: the change feed vouched for Redis.
	RedisTrusted func() bool
	// BreakerClosed is the store breaker's.
	BreakerClosed func() bool
	// PingStore and PingRedis (nil without Redis) ask each directly; each
	// call is bounded by its timeout.
	PingStore, PingRedis       func(context.Context) error
	StoreTimeout, RedisTimeout time.Duration
}

// NewReadiness pings the store, and Redis when set, each within its
// timeout; until warmUp after started it also waits for the cache to trust
// Redis.
func NewReadiness(draining *atomic.Bool, started time.Time, d ReadinessDeps) Readiness {
	r := Readiness{
		draining:     draining,
		warming:      func() bool { return !d.RedisTrusted() && time.Since(started) < warmUp },
		storeSuspect: func() bool { return !d.BreakerClosed() },
		pingStore:    within(d.StoreTimeout, d.PingStore),
	}
	if d.PingRedis != nil {
		r.pingCache = within(d.RedisTimeout, d.PingRedis)
	}
	return r
}

// within bounds each call of ping by timeout.
func within(timeout time.Duration, ping func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return ping(ctx)
	}
}
