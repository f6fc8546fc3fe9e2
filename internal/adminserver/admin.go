// Package adminserver owns the admin listener, on an address not exposed to
// clients: liveness, the readiness policy (/readyz), Prometheus metrics
// and counters as JSON; and the healthcheck client that asks it. A
// Readiness and the listener's handlers read the components' own
// concurrency-safe state and may be called from any goroutine.
package adminserver

import (
	"encoding/json"
	"net/http"
	"time"

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

// New returns the admin listener, on an address that is not exposed
// to clients: liveness (/livez, and /healthz as an alias), readiness
// (/readyz, see Readiness), Prometheus metrics (/metrics) and counters as
// JSON (/stats).
func New(addr string, ready Readiness, listings *cache.Cache, guarded *upstream.Guarded, srv *gateway.Server,
	purger *cdn.Purger, changes *feed.Consumer, revocations *revocation.Keeper, m *metrics.Metrics) *http.Server {
	mux := http.NewServeMux()
	live := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }
	mux.HandleFunc("GET /livez", live)
	mux.HandleFunc("GET /healthz", live)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if reason := ready.Check(r.Context()); reason != "" {
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
		Handler:           noStore(mux),
		ReadHeaderTimeout: time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      5 * time.Second,
	}
}

// noStore marks every admin answer as not to be kept by any cache: the
// counters, metrics and health it reports are of the moment (RFC 9111
// §5.2.2.5), and a proxy or browser in between must not answer from an
// old copy.
func noStore(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}
