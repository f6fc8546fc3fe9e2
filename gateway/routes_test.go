package gateway

import (
	"net/http"
	"slices"
	"strings"
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
		if !metrics.ServedMethods(r.Path, r.Method) {
			t.Errorf("route %s %s: its series do not exist from the start (metrics.ServedMethods)", r.Method, r.Path)
		}
	}
}

// TestMethodNotAllowed: a method a route does not serve is a 405 problem
// whose Allow lists the route's methods, and not the refused one.
func TestMethodNotAllowed(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		method, path string
		wantAllow    []string
	}{
		{method: "PATCH", path: "/realty/1", wantAllow: []string{"GET", "PUT", "DELETE"}},
		{method: "POST", path: "/realty/1", wantAllow: []string{"GET", "PUT", "DELETE"}},
		{method: "POST", path: "/realty/5", wantAllow: []string{"GET", "PUT", "DELETE"}},
		{method: "GET", path: "/realty", wantAllow: []string{"POST"}},
		{method: "DELETE", path: "/realty", wantAllow: []string{"POST"}},
		{method: "PUT", path: "/realty", wantAllow: []string{"POST"}},
		{method: "GET", path: "/auth/login", wantAllow: []string{"POST"}},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			resp, body := f.send(t, tt.method, tt.path, bearer(t, 1, 1), "")
			requireProblem(t, resp, body, http.StatusMethodNotAllowed)
			allow := strings.Split(resp.Header.Get("Allow"), ", ")
			for _, m := range tt.wantAllow {
				if !slices.Contains(allow, m) {
					t.Fatalf("Allow = %q, want %s in it", resp.Header.Get("Allow"), m)
				}
			}
			if slices.Contains(allow, tt.method) {
				t.Fatalf("Allow = %q lists the refused method %s", resp.Header.Get("Allow"), tt.method)
			}
		})
	}
}

// TestUnknownMethods: a method the gateway does not recognise is 501
// (RFC 9110 §9.1) as a problem, named by an X-Request-ID, with the path's
// methods in Allow where it has any; one it knows but a route does not
// serve stays 405.
func TestUnknownMethods(t *testing.T) {
	f := newFixture(t)
	for _, tt := range []struct {
		method, path string
		wantAllow    []string
	}{
		{method: "FOO", path: "/realty/1", wantAllow: []string{"GET", "HEAD", "PUT", "DELETE"}},
		{method: "QUERY", path: "/realty/1", wantAllow: []string{"GET", "HEAD", "PUT", "DELETE"}},
		{method: "PROPFIND", path: "/realty", wantAllow: []string{"POST"}},
		{method: "LINK", path: "/auth/login", wantAllow: []string{"POST"}},
		{method: "FOO", path: "/nowhere"},
	} {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			resp, body := f.send(t, tt.method, tt.path, bearer(t, 1, 1), "")
			p := requireProblem(t, resp, body, http.StatusNotImplemented)
			if id := resp.Header.Get("X-Request-ID"); id == "" || p["requestId"] != id {
				t.Fatalf("X-Request-ID %q, problem's requestId %v", id, p["requestId"])
			}
			if p["title"] != "Not Implemented" || resp.Status != "501 Not Implemented" {
				t.Fatalf("status %q, title %v", resp.Status, p["title"])
			}
			allow := resp.Header.Get("Allow")
			for _, m := range tt.wantAllow {
				if !slices.Contains(strings.Split(allow, ", "), m) {
					t.Fatalf("Allow = %q, want %s in it", allow, m)
				}
			}
			if len(tt.wantAllow) == 0 && allow != "" {
				t.Fatalf("Allow = %q on a path with no routes", allow)
			}
		})
	}
	resp, body := f.send(t, "TRACE", "/realty/1", bearer(t, 1, 1), "")
	requireProblem(t, resp, body, http.StatusMethodNotAllowed)
}
