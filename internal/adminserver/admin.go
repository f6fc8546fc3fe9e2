// Package adminserver owns the admin listener, on an address not exposed to
// clients: liveness, the readiness policy (/readyz), Prometheus metrics
// and counters as JSON; and the healthcheck client that asks it. It knows
// no component: each gives its own view of itself as a Section of /stats,
// and readiness asks what ReadinessDeps name. A Readiness and the
// listener's handlers read the components' own concurrency-safe state and
// may be called from any goroutine.
package adminserver

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"
)

// Section is one member of /stats: a component's own view of itself,
// encoded as JSON on every request.
type Section struct {
	Name  string
	Stats func() any
}

// New returns the admin listener, on an address that is not exposed
// to clients: liveness (/livez, and /healthz as an alias), readiness
// (/readyz, see Readiness), Prometheus metrics (/metrics) and the
// sections as one JSON object, in their order (/stats).
func New(addr string, ready Readiness, metrics http.Handler, sections ...Section) *http.Server {
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
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		body, err := statsJSON(sections)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
	return &http.Server{
		Addr:              addr,
		Handler:           noStore(mux),
		ReadHeaderTimeout: time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      5 * time.Second,
	}
}

// statsJSON is one object with a member per section, in order.
func statsJSON(sections []Section) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, s := range sections {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(s.Name)
		v, err := json.Marshal(s.Stats())
		if err != nil {
			return nil, err
		}
		b.Write(name)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
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
