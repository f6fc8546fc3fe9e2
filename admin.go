package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/breaker"
	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/cdn"
	"github.com/realty-gateway/gateway/feed"
	"github.com/realty-gateway/gateway/gateway"
	"github.com/realty-gateway/gateway/metrics"
	"github.com/realty-gateway/gateway/revocation"
	"github.com/realty-gateway/gateway/upstream"
)

// purgeStats count CDN purge requests delivered, attempts that failed, and
// purges given up.
type purgeStats struct {
	Sent    uint64 `json:"sent"`
	Failed  uint64 `json:"failed"`
	Dropped uint64 `json:"dropped"`
}

// readiness decides /readyz. It is false while draining, and while the
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
type readiness struct {
	draining     *atomic.Bool
	warming      func() bool                 // nil: never
	storeSuspect func() bool                 // the store's breaker is not closed
	pingStore    func(context.Context) error // within its own timeout
	pingCache    func(context.Context) error // nil without Redis
}

// check returns the reason the gateway is not ready, or "".
func (r readiness) check(ctx context.Context) string {
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

// newReadiness checks store, and rdb when set, each within its timeout;
// until warmUp after started it also waits for listings to trust Redis.
func newReadiness(draining *atomic.Bool, listings *cache.Cache, started time.Time, guarded *upstream.Guarded, store upstream.Store,
	storeTimeout time.Duration, rdb redis.UniversalClient, redisTimeout time.Duration) readiness {
	r := readiness{
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

// newAdmin returns the admin listener, on an address that is not exposed
// to clients: liveness (/livez, and /healthz as an alias), readiness
// (/readyz, see readiness), Prometheus metrics (/metrics) and counters as
// JSON (/stats).
func newAdmin(addr string, ready readiness, listings *cache.Cache, guarded *upstream.Guarded, srv *gateway.Server,
	purger *cdn.Purger, changes *feed.Consumer, revocations *revocation.Keeper, m *metrics.Metrics) *http.Server {
	mux := http.NewServeMux()
	live := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }
	mux.HandleFunc("GET /livez", live)
	mux.HandleFunc("GET /healthz", live)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if reason := ready.check(r.Context()); reason != "" {
			http.Error(w, reason, http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.Handle("GET /metrics", m.Handler())
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		var purges purgeStats
		if purger != nil {
			purges = purgeStats{Sent: purger.Sent(), Failed: purger.Failed(), Dropped: purger.Dropped()}
		}
		_ = json.NewEncoder(w).Encode(struct {
			Cache       cache.Stats      `json:"cache"`
			BreakerOpen bool             `json:"breakerOpen"`
			Panics      uint64           `json:"panics"`
			Purges      purgeStats       `json:"purges"`
			Feed        feed.Stats       `json:"feed"`
			Revocations revocation.Stats `json:"revocations"`
		}{listings.Stats(), guarded.Open(), srv.Panics(), purges, changes.Stats(), revocations.Stats()})
	})
	return &http.Server{
		Addr:              addr,
		Handler:           mux,
		ReadHeaderTimeout: time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      5 * time.Second,
	}
}

// healthcheck asks the admin listener at addr whether the process is live,
// for a container's HEALTHCHECK (distroless images have no curl). A
// listener on every interface is asked on the loopback.
func healthcheck(ctx context.Context, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("admin address %q: %w", addr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/livez", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("healthcheck: /livez answered %d", resp.StatusCode)
	}
	return nil
}
