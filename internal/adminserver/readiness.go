package adminserver

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/breaker"
	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/upstream"
)

// Readiness decides /readyz. It is false while draining, and while the
// store and the shared cache tier both fail: then nothing can be served,
// not even stale. A gateway whose store is down but whose cache answers
// stays in rotation, since it serves cached listings (stale within
// GATEWAY_CACHE_STALE); so does one without Redis, whose in-process cache
// is all it has.
//
// A gateway that has just started is not ready while it warms up: until
// the change feed has vouched for Redis (see cache/trust.go), every read
// would go to the store, so a rolling deploy would send the whole fleet's
// traffic there. The wait is bounded by warmUp, so that an outage at start
// does not keep it out of rotation.
//
// The store's breaker is the evidence under traffic: while it is closed,
// the gateway is ready with no check. Otherwise the store and Redis are
// asked directly, each within its timeout, so that the answer does not
// flap when a breaker turns half-open on its own in a gateway that gets
// no traffic because it is out of rotation.
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

// NewReadiness checks store, and rdb when set, each within its timeout;
// until warmUp after started it also waits for listings to trust Redis.
func NewReadiness(draining *atomic.Bool, listings *cache.Cache, started time.Time, guarded *upstream.Guarded, store upstream.Store,
	storeTimeout time.Duration, rdb redis.UniversalClient, redisTimeout time.Duration) Readiness {
	r := Readiness{
		draining:     draining,
		warming:      func() bool { return !listings.RedisTrusted() && time.Since(started) < warmUp },
		storeSuspect: func() bool { return guarded.BreakerState() != breaker.Closed },
		pingStore: func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, storeTimeout)
			defer cancel()
			return store.Ping(ctx)
		},
	}
	if rdb != nil {
		r.pingCache = func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, redisTimeout)
			defer cancel()
			return rdb.Ping(ctx).Err()
		}
	}
	return r
}
