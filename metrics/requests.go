package metrics

import (
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// requests holds gateway_http_requests_total and
// gateway_http_request_duration_seconds in plain atomic counters, one set
// per route and method, and builds the Prometheus series from them at
// scrape time. A request costs three atomic adds and no interface call or
// label lookup, where a client_golang counter and histogram cost five
// atomics (one a compare-and-swap loop) behind two interface calls: on a
// cached view that difference is measurable (metrics_test.go).
type requests struct {
	countDesc, durationDesc *prometheus.Desc
	routes                  [nRoutes]string
	methods                 [nMethods]string
	bounds                  [nBounds]float64 // seconds
	boundNanos              [nBounds]int64
	series                  [nRoutes * nMethods]requestSeries
	served                  [nRoutes * nMethods]bool // exported at 0 too
}

const (
	nRoutes  = 6
	nMethods = 6
	nBounds  = 15
)

// routeLabels and methodLabels are the label values of the request series;
// the last of each stands for any other.
func routeLabels() [nRoutes]string {
	return [...]string{"/realty/:ref", "/auth/login", "/realty", "/openapi.yaml", "/.well-known/jwks.json", "other"}
}

func methodLabels() [nMethods]string {
	return [...]string{"GET", "POST", "PUT", "DELETE", "HEAD", "OTHER"}
}

// servedMethods are the methods each route serves: their series exist
// from the start, at 0 (zeroCodes for the counter, and the histogram), so
// that a panel or an alert that names them has data and rate() sees the
// first errors.
func servedMethods() map[string][]string {
	return map[string][]string{
		"/realty/:ref": {"GET", "HEAD", "PUT", "DELETE"}, "/auth/login": {"POST"},
		"/realty": {"POST"}, "/openapi.yaml": {"GET", "HEAD"},
		"/.well-known/jwks.json": {"GET", "HEAD"},
	}
}

// zeroCodes are the status codes whose series a served route and method
// has from the start: the 5xx the gateway answers (problem.go).
var zeroCodes = [...]int{500, 503}

// ServedMethods reports whether the series of route and method exist from
// the start: every route and method the gateway serves must.
func ServedMethods(route, method string) bool {
	return slices.Contains(servedMethods()[route], method)
}

// durationBounds are the histogram's upper bounds, in seconds.
func durationBounds() [nBounds]float64 {
	return [...]float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
}

type requestSeries struct {
	codes    [600]atomic.Uint64 // by status code; 0 holds codes out of range
	buckets  [nBounds + 1]atomic.Uint64
	sumNanos atomic.Int64
}

func newRequests() *requests {
	r := &requests{routes: routeLabels(), methods: methodLabels(), bounds: durationBounds(),
		countDesc: prometheus.NewDesc("gateway_http_requests_total",
			"HTTP requests by route template, method and status code.", []string{"route", "method", "code"}, nil),
		durationDesc: prometheus.NewDesc("gateway_http_request_duration_seconds",
			"HTTP request duration by route template and method.", []string{"route", "method"}, nil),
	}
	for i, b := range r.bounds {
		r.boundNanos[i] = int64(b * float64(time.Second))
	}
	for route, methods := range servedMethods() {
		for _, method := range methods {
			r.served[indexOf(r.routes[:], route)*nMethods+indexOf(r.methods[:], method)] = true
		}
	}
	return r
}

func (r *requests) observe(route, method string, code int, d time.Duration) {
	se := &r.series[indexOf(r.routes[:], route)*nMethods+indexOf(r.methods[:], method)]
	if code < 0 || code >= len(se.codes) {
		code = 0
	}
	se.codes[code].Add(1)
	b := 0
	for b < len(r.boundNanos) && int64(d) > r.boundNanos[b] {
		b++
	}
	se.buckets[b].Add(1)
	se.sumNanos.Add(int64(d))
}

// indexOf is v's index in values, or the last one's ("other").
func indexOf(values []string, v string) int {
	for i, x := range values[:len(values)-1] {
		if x == v {
			return i
		}
	}
	return len(values) - 1
}

func (r *requests) Describe(ch chan<- *prometheus.Desc) {
	ch <- r.countDesc
	ch <- r.durationDesc
}

func (r *requests) Collect(ch chan<- prometheus.Metric) {
	for i := range r.series {
		se := &r.series[i]
		route, method := r.routes[i/nMethods], r.methods[i%nMethods]
		for code := range se.codes {
			if n := se.codes[code].Load(); n > 0 || r.served[i] && slices.Contains(zeroCodes[:], code) {
				label := strconv.Itoa(code)
				if code == 0 {
					label = "other"
				}
				ch <- prometheus.MustNewConstMetric(r.countDesc, prometheus.CounterValue, float64(n), route, method, label)
			}
		}
		var count uint64
		cumulative := make(map[float64]uint64, nBounds)
		for b := range se.buckets {
			count += se.buckets[b].Load()
			if b < nBounds {
				cumulative[r.bounds[b]] = count
			}
		}
		if count > 0 || r.served[i] {
			sum := float64(se.sumNanos.Load()) / float64(time.Second)
			ch <- prometheus.MustNewConstHistogram(r.durationDesc, count, sum, cumulative, route, method)
		}
	}
}

// RouteLabels are the route label values that get series of their own,
// "other" last: every route the gateway serves must be one.
func RouteLabels() []string {
	labels := routeLabels()
	return labels[:]
}
