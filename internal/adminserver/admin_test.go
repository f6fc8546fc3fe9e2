package adminserver

import (
	"context"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/realty-gateway/gateway/metrics"
)

// TestAdminAnswersAreNotStored: the admin listener's answers (metrics,
// health, readiness, a 404 and a 405 too) carry Cache-Control: no-store.
func TestAdminAnswersAreNotStored(t *testing.T) {
	var draining atomic.Bool
	ready := Readiness{draining: &draining, storeSuspect: func() bool { return false },
		pingStore: func(context.Context) error { return nil }}
	srv := New("127.0.0.1:0", ready, metrics.New().Handler(), Section{Name: "panics", Stats: func() any { return 0 }})
	for _, tt := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/metrics", 200}, {"GET", "/stats", 200}, {"GET", "/livez", 204}, {"GET", "/healthz", 204}, {"GET", "/readyz", 204},
		{"GET", "/nothing", 404}, {"POST", "/metrics", 405},
	} {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			w := httptest.NewRecorder()
			srv.Handler.ServeHTTP(w, httptest.NewRequest(tt.method, tt.path, nil))
			if w.Code != tt.want {
				t.Fatalf("status %d, want %d", w.Code, tt.want)
			}
			if cc := w.Header().Values("Cache-Control"); len(cc) != 1 || cc[0] != "no-store" {
				t.Fatalf("Cache-Control %q, want no-store", cc)
			}
		})
	}
}
