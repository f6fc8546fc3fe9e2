package adminserver

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestStatsAreTheSections: /stats is one object of the sections' own
// views, in order, read afresh on every request.
func TestStatsAreTheSections(t *testing.T) {
	var hits atomic.Int64
	srv := New("127.0.0.1:0", Readiness{}, http.NotFoundHandler(),
		Section{Name: "cache", Stats: func() any { return map[string]int64{"hits": hits.Load()} }},
		Section{Name: "breakerOpen", Stats: func() any { return false }},
	)
	for _, want := range []string{`{"cache":{"hits":0},"breakerOpen":false}` + "\n", `{"cache":{"hits":7},"breakerOpen":false}` + "\n"} {
		rec := httptest.NewRecorder()
		srv.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/stats", nil))
		body, _ := io.ReadAll(rec.Body)
		if rec.Code != 200 || string(body) != want || rec.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("GET /stats: %d %s %q; want 200 %s", rec.Code, rec.Header().Get("Content-Type"), body, want)
		}
		hits.Store(7)
	}
}
