package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRequestSeries(t *testing.T) {
	m := New()
	m.Request("/realty/:ref", "GET", 200, 150*time.Microsecond)
	m.Request("/realty/:ref", "GET", 200, 3*time.Millisecond)
	m.Request("/realty/:ref", "GET", 404, time.Millisecond)
	m.Request("/no/such/route", "BREW", 418, 10*time.Second)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`gateway_http_requests_total{code="200",method="GET",route="/realty/:ref"} 2`,
		`gateway_http_requests_total{code="404",method="GET",route="/realty/:ref"} 1`,
		`gateway_http_requests_total{code="418",method="OTHER",route="other"} 1`,
		`gateway_http_request_duration_seconds_bucket{method="GET",route="/realty/:ref",le="0.0001"} 0`,
		`gateway_http_request_duration_seconds_bucket{method="GET",route="/realty/:ref",le="0.00025"} 1`,
		`gateway_http_request_duration_seconds_bucket{method="GET",route="/realty/:ref",le="0.001"} 2`,
		`gateway_http_request_duration_seconds_bucket{method="GET",route="/realty/:ref",le="0.005"} 3`,
		`gateway_http_request_duration_seconds_bucket{method="GET",route="/realty/:ref",le="+Inf"} 3`,
		`gateway_http_request_duration_seconds_sum{method="GET",route="/realty/:ref"} 0.00415`,
		`gateway_http_request_duration_seconds_count{method="GET",route="/realty/:ref"} 3`,
		`gateway_http_request_duration_seconds_bucket{method="OTHER",route="other",le="5"} 0`,
		`gateway_http_request_duration_seconds_count{method="OTHER",route="other"} 1`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("no line %s", want)
		}
	}
	// A route's served methods have their 5xx series and histogram from
	// the start; a method it does not serve has none.
	for _, want := range []string{
		`gateway_http_requests_total{code="500",method="POST",route="/auth/login"} 0`,
		`gateway_http_requests_total{code="503",method="HEAD",route="/realty/:ref"} 0`,
		`gateway_http_request_duration_seconds_count{method="DELETE",route="/realty/:ref"} 0`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("no line %s", want)
		}
	}
	for _, unwanted := range []string{`method="POST",route="/realty/:ref"`, `code="200",method="POST"`, `method="PUT",route="other"`} {
		if strings.Contains(string(body), unwanted) {
			t.Errorf("a series without requests is exported: %s", unwanted)
		}
	}
}

// TestSeriesExistFromTheStart: the labelled series of logins, rate-limit
// rejections, refused tokens and store calls exist at 0 before any event.
func TestSeriesExistFromTheStart(t *testing.T) {
	m := New()
	m.StoreOps([]string{"listing_by_id"})
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	var want []string
	for _, l := range RateLimits() {
		want = append(want, `gateway_ratelimit_rejections_total{limit="`+l+`"} 0`)
	}
	for _, o := range LoginOutcomes() {
		want = append(want, `gateway_logins_total{outcome="`+o+`"} 0`)
	}
	for _, r := range AuthFailureReasons() {
		want = append(want, `gateway_auth_failures_total{reason="`+r+`"} 0`)
	}
	for _, o := range StoreOutcomes() {
		want = append(want, `gateway_store_requests_total{op="listing_by_id",outcome="`+o+`"} 0`,
			`gateway_store_request_duration_seconds_count{op="listing_by_id",outcome="`+o+`"} 0`)
	}
	for _, w := range want {
		if !strings.Contains(string(body), w+"\n") {
			t.Errorf("no line %s", w)
		}
	}
}

// BenchmarkRequest compares the request series' cost with a client_golang
// counter and histogram holding the same series.
func BenchmarkRequest(b *testing.B) {
	b.Run("atomic series", func(b *testing.B) {
		m := New()
		for b.Loop() {
			m.Request("/realty/:ref", "GET", 200, 120*time.Microsecond)
		}
	})
	b.Run("baseline: client_golang counter and histogram", func(b *testing.B) {
		bounds := durationBounds()
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c"}, []string{"route", "method", "code"}).WithLabelValues("/realty/:ref", "GET", "200")
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "h", Buckets: bounds[:]}, []string{"route", "method"}).WithLabelValues("/realty/:ref", "GET")
		for b.Loop() {
			c.Inc()
			h.Observe((120 * time.Microsecond).Seconds())
		}
	})
	b.Run("baseline: one clock read", func(b *testing.B) {
		began := time.Now()
		var d time.Duration
		for b.Loop() {
			d += time.Since(began)
		}
		_ = d
	})
}
