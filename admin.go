package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/cdn"
	"github.com/realty-gateway/gateway/gateway"
	"github.com/realty-gateway/gateway/metrics"
	"github.com/realty-gateway/gateway/upstream"
)

// purgeStats count CDN purge requests delivered, attempts that failed, and
// purges given up.
type purgeStats struct {
	Sent    uint64 `json:"sent"`
	Failed  uint64 `json:"failed"`
	Dropped uint64 `json:"dropped"`
}

// newAdmin returns the admin listener, on an address that is not exposed
// to clients: liveness (/livez, and /healthz as an alias), readiness
// (/readyz), Prometheus metrics (/metrics) and counters as JSON (/stats).
//
// Readiness is false while draining, and while the store's breaker is open
// and the shared cache tier fails too: then nothing can be served, not
// even stale. A gateway whose store is down but whose cache answers stays
// in rotation, since it serves cached listings (stale within
// GATEWAY_CACHE_STALE).
func newAdmin(addr string, draining *atomic.Bool, listings *cache.Cache, guarded *upstream.Guarded, srv *gateway.Server,
	purger *cdn.Purger, m *metrics.Metrics) *http.Server {
	mux := http.NewServeMux()
	live := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }
	mux.HandleFunc("GET /livez", live)
	mux.HandleFunc("GET /healthz", live)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case draining.Load():
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
		case guarded.Open() && listings.TierBreakerState() == 2:
			http.Error(w, "store and cache both failing", http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	mux.Handle("GET /metrics", m.Handler())
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
