package main

import (
	"encoding/json"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/cdn"
	"github.com/realty-gateway/gateway/gateway"
	"github.com/realty-gateway/gateway/upstream"
)

// purgeStats count CDN purge requests delivered, attempts that failed, and
// purges given up.
type purgeStats struct {
	Sent    uint64 `json:"sent"`
	Failed  uint64 `json:"failed"`
	Dropped uint64 `json:"dropped"`
}

// newAdmin returns the admin listener: liveness, readiness and counters,
// on an address that is not exposed to clients.
func newAdmin(addr string, ready *atomic.Bool, listings *cache.Cache, guarded *upstream.Guarded, srv *gateway.Server, purger *cdn.Purger) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		var purges purgeStats
		if purger != nil {
			purges = purgeStats{Sent: purger.Sent(), Failed: purger.Failed(), Dropped: purger.Dropped()}
		}
		_ = json.NewEncoder(w).Encode(struct {
			Cache       cache.Stats `json:"cache"`
			BreakerOpen bool        `json:"breakerOpen"`
			Panics      uint64      `json:"panics"`
			Purges      purgeStats  `json:"purges"`
		}{listings.Stats(), guarded.Open(), srv.Panics(), purges})
	})
	return &http.Server{
		Addr:              addr,
		Handler:           mux,
		ReadHeaderTimeout: time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      5 * time.Second,
	}
}
