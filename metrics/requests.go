package metrics

import (
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
	boundNanos              [len(durationBounds)]int64 // durationBounds in nanoseconds
	series                  [len(routes) * len(methods)]requestSeries
}

// durationBounds are the histogram's upper bounds, in seconds.
var durationBounds = [...]float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

type requestSeries struct {
	codes    [600]atomic.Uint64 // by status code; 0 holds codes out of range
	buckets  [len(durationBounds) + 1]atomic.Uint64
	sumNanos atomic.Int64
}

func newRequests() *requests {
	r := &requests{
		countDesc: prometheus.NewDesc("gateway_http_requests_total",
			"HTTP requests by route template, method and status code.", []string{"route", "method", "code"}, nil),
		durationDesc: prometheus.NewDesc("gateway_http_request_duration_seconds",
			"HTTP request duration by route template and method.", []string{"route", "method"}, nil),
	}
	for i, b := range durationBounds {
		r.boundNanos[i] = int64(b * float64(time.Second))
	}
	return r
}

func (r *requests) observe(route, method string, code int, d time.Duration) {
	se := &r.series[indexOf(routes[:], route, len(routes)-1)*len(methods)+indexOf(methods[:], method, len(methods)-1)]
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

// indexOf is v's index in values, or other (the index of "other").
func indexOf(values []string, v string, other int) int {
	for i, x := range values {
		if x == v {
			return i
		}
	}
	return other
}

func (r *requests) Describe(ch chan<- *prometheus.Desc) {
	ch <- r.countDesc
	ch <- r.durationDesc
}

func (r *requests) Collect(ch chan<- prometheus.Metric) {
	for i := range r.series {
		se := &r.series[i]
		route, method := routes[i/len(methods)], methods[i%len(methods)]
		for code := range se.codes {
			if n := se.codes[code].Load(); n > 0 {
				label := strconv.Itoa(code)
				if code == 0 {
					label = "other"
				}
				ch <- prometheus.MustNewConstMetric(r.countDesc, prometheus.CounterValue, float64(n), route, method, label)
			}
		}
		var count uint64
		cumulative := make(map[float64]uint64, len(durationBounds))
		for b := range se.buckets {
			count += se.buckets[b].Load()
			if b < len(durationBounds) {
				cumulative[durationBounds[b]] = count
			}
		}
		if count > 0 {
			sum := float64(se.sumNanos.Load()) / float64(time.Second)
			ch <- prometheus.MustNewConstHistogram(r.durationDesc, count, sum, cumulative, route, method)
		}
	}
}
