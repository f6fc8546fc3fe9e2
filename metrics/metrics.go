// Package metrics owns the gateway's Prometheus registry: the Go and
// process collectors, the counters and histograms the request path feeds
// (requests, logins, rate-limit rejections, store calls), and gauges and
// counters read from the components' own counters at scrape time, which
// cost the request path nothing. Metric names are a contract for
// dashboards and alerts; the README lists them.
//
// Concurrency: a *Metrics is safe for concurrent use.
package metrics

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is the registry and the metrics fed by the request path.
type Metrics struct {
	reg        *prometheus.Registry
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	logins     *prometheus.CounterVec
	rejections *prometheus.CounterVec
	store      *prometheus.CounterVec
	storeTime  *prometheus.HistogramVec

	// series caches each label set's counter and histogram by the index
	// of its route, method and code, so that a request neither hashes its
	// labels nor takes a lock; sync.Map holds the rare others.
	series [len(routes) * len(methods) * 600]atomic.Pointer[series]
	others sync.Map // seriesKey -> *series
}

// routes and methods are the label values that get a slot in series.
var (
	routes  = [...]string{"/realty/:ref", "/auth/login", "/realty", "/openapi.yaml", "other"}
	methods = [...]string{"GET", "POST", "PUT", "DELETE", "HEAD", "OTHER"}
)

type seriesKey struct {
	route, method string
	code          int
}

func slot(route, method string, code int) (int, bool) {
	r, m := -1, -1
	for i, v := range routes {
		if v == route {
			r = i
		}
	}
	for i, v := range methods {
		if v == method {
			m = i
		}
	}
	if r < 0 || m < 0 || code < 0 || code >= 600 {
		return 0, false
	}
	return (r*len(methods)+m)*600 + code, true
}

type series struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

// New registers the standard collectors and the gateway's metrics.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_http_requests_total", Help: "HTTP requests by route template, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gateway_http_request_duration_seconds", Help: "HTTP request duration by route template and method.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route", "method"}),
		logins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_logins_total", Help: "Logins by outcome: ok, bad_credentials, limited, unavailable, bad_request.",
		}, []string{"outcome"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_ratelimit_rejections_total", Help: "Logins refused by a limit, by limit.",
		}, []string{"limit"}),
		store: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_store_requests_total", Help: "Store calls by operation and outcome: ok, not_found, error, rejected.",
		}, []string{"op", "outcome"}),
		storeTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gateway_store_request_duration_seconds", Help: "Store call duration by operation and outcome.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"op", "outcome"}),
	}
	reg.MustRegister(m.requests, m.duration, m.logins, m.rejections, m.store, m.storeTime)
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Request counts one answered request. route is the route template, never
// the raw path.
func (m *Metrics) Request(route, method string, code int, d time.Duration) {
	se := m.seriesOf(route, method, code)
	se.count.Inc()
	se.duration.Observe(d.Seconds())
}

func (m *Metrics) seriesOf(route, method string, code int) *series {
	i, ok := slot(route, method, code)
	if ok {
		if se := m.series[i].Load(); se != nil {
			return se
		}
	}
	// The caller's strings may alias a request buffer (fasthttp's are
	// reused): what is kept is copied.
	route, method = strings.Clone(route), strings.Clone(method)
	k := seriesKey{route, method, code}
	s, found := m.others.Load(k)
	if !found {
		s, _ = m.others.LoadOrStore(k, &series{
			count:    m.requests.WithLabelValues(route, method, strconv.Itoa(code)),
			duration: m.duration.WithLabelValues(route, method),
		})
	}
	se := s.(*series)
	if ok {
		m.series[i].Store(se)
	}
	return se
}

// Login counts a login by outcome.
func (m *Metrics) Login(outcome string) { m.logins.WithLabelValues(outcome).Inc() }

// RateLimited counts a login refused by the named limit.
func (m *Metrics) RateLimited(limit string) { m.rejections.WithLabelValues(limit).Inc() }

// StoreCall counts one store call.
func (m *Metrics) StoreCall(op, outcome string, d time.Duration) {
	m.store.WithLabelValues(op, outcome).Inc()
	m.storeTime.WithLabelValues(op, outcome).Observe(d.Seconds())
}

// CounterFunc registers a counter read from fn at scrape time.
func (m *Metrics) CounterFunc(name, help string, labels prometheus.Labels, fn func() float64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, fn))
}

// GaugeFunc registers a gauge read from fn at scrape time.
func (m *Metrics) GaugeFunc(name, help string, labels prometheus.Labels, fn func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, fn))
}
