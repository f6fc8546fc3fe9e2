package gateway

import (
	"slices"
	"testing"

	"github.com/realty-gateway/gateway/metrics"
)

// TestEveryRouteHasMetricSeries: each route of the app is a route label
// of its own in the metrics, not "other".
func TestEveryRouteHasMetricSeries(t *testing.T) {
	f := newFixture(t)
	for _, r := range f.app.GetRoutes(true) {
		if !slices.Contains(metrics.RouteLabels(), r.Path) {
			t.Errorf("route %s %s has no series of its own in metrics.RouteLabels", r.Method, r.Path)
		}
	}
}
