// Package metrics owns the gateway's Prometheus registry: the Go and
// process collectors, the counters and histograms the request path feeds
// (requests, logins, rate-limit rejections, refused tokens, store calls),
// and gauges and
// counters read from the components' own counters at scrape time, which
// cost the request path nothing. Metric names are a contract for
// dashboards and alerts; docs/operating.md lists them.
//
// Concurrency: a *Metrics is safe for concurrent use.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is the registry and the metrics fed by the request path.
type Metrics struct {
	reg        *prometheus.Registry
	requests   *requests
	logins     *prometheus.CounterVec
	rejections *prometheus.CounterVec
	authFails  *prometheus.CounterVec
	store      *prometheus.CounterVec
	storeTime  *prometheus.HistogramVec
}

// New registers the standard collectors and the gateway's metrics.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{
		reg:      reg,
		requests: newRequests(),
		logins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_logins_total", Help: "Logins by outcome: ok, bad_credentials, limited, unavailable, bad_request.",
		}, []string{"outcome"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_ratelimit_rejections_total", Help: "Logins refused by a limit, by limit.",
		}, []string{"limit"}),
		authFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_auth_failures_total", Help: "Requests refused for their bearer token, by reason: missing, malformed, invalid, expired, revoked.",
		}, []string{"reason"}),
		store: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_store_requests_total", Help: "Store calls by operation and outcome: ok, not_found, error, rejected.",
		}, []string{"op", "outcome"}),
		storeTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gateway_store_request_duration_seconds", Help: "Store call duration by operation and outcome.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"op", "outcome"}),
	}
	// Every series that a panel or an alert may name exists from the
	// start, at 0: a panel has data, and rate() sees the first events.
	for _, reason := range AuthFailureReasons() {
		m.authFails.WithLabelValues(reason)
	}
	for _, outcome := range LoginOutcomes() {
		m.logins.WithLabelValues(outcome)
	}
	for _, limit := range RateLimits() {
		m.rejections.WithLabelValues(limit)
	}
	reg.MustRegister(m.requests, m.logins, m.rejections, m.authFails, m.store, m.storeTime)
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Request counts one answered request. route is the route template
// (routeLabels; any other counts as "other"), never the raw path; method
// one of methodLabels, else "OTHER".
func (m *Metrics) Request(route, method string, code int, d time.Duration) {
	m.requests.observe(route, method, code, d)
}

// LoginOutcomes are the outcome label values of gateway_logins_total.
func LoginOutcomes() []string {
	return []string{"ok", "bad_credentials", "limited", "unavailable", "bad_request"}
}

// RateLimits are the limit label values of
// gateway_ratelimit_rejections_total: the login limits.
func RateLimits() []string { return []string{"ip", "key", "account", "unknown_keys"} }

// StoreOutcomes are the outcome label values of the store's series.
func StoreOutcomes() []string { return []string{"ok", "not_found", "error", "rejected"} }

// StoreOps creates the store's series of these operations, for every
// outcome, at 0.
func (m *Metrics) StoreOps(ops []string) {
	for _, op := range ops {
		for _, outcome := range StoreOutcomes() {
			m.store.WithLabelValues(op, outcome)
			m.storeTime.WithLabelValues(op, outcome)
		}
	}
}

// Login counts a login by outcome.
func (m *Metrics) Login(outcome string) { m.logins.WithLabelValues(outcome).Inc() }

// RateLimited counts a login refused by the named limit.
func (m *Metrics) RateLimited(limit string) { m.rejections.WithLabelValues(limit).Inc() }

// AuthFailureReasons are the reason label values of
// gateway_auth_failures_total.
func AuthFailureReasons() []string {
	return []string{"missing", "malformed", "invalid", "expired", "revoked"}
}

// AuthFailure counts a request refused for its token.
func (m *Metrics) AuthFailure(reason string) { m.authFails.WithLabelValues(reason).Inc() }

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
