package platform

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/realty-gateway/gateway/internal/config"
)

func someSpans(name string) []*tracepb.ResourceSpans {
	return []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{Name: name}}}}}}
}

// TestOTLPClientPosts checks one export as a collector sees it: the path,
// the content type, the operator's headers, gzip, and a body that decodes
// to the spans sent.
func TestOTLPClientPosts(t *testing.T) {
	for _, gz := range []bool{false, true} {
		var got struct {
			path, ctype, auth, encoding string
			data                        tracepb.TracesData
		}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got.path, got.ctype, got.auth, got.encoding = r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Authorization"), r.Header.Get("Content-Encoding")
			var body io.Reader = r.Body
			if got.encoding == "gzip" {
				zr, err := gzip.NewReader(r.Body)
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				body = zr
			}
			b, _ := io.ReadAll(body)
			if err := proto.Unmarshal(b, &got.data); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
			}
		}))
		c, err := newOTLPClient(config.OTLPExport{URL: srv.URL + "/v1/traces", Headers: map[string]string{"Authorization": "Bearer t0k"}, Timeout: 10 * time.Second, Gzip: gz})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.UploadTraces(context.Background(), someSpans("GET /realty/:ref")); err != nil {
			t.Fatalf("gzip %v: %v", gz, err)
		}
		srv.Close()
		wantEncoding := map[bool]string{true: "gzip"}[gz]
		if got.path != "/v1/traces" || got.ctype != "application/x-protobuf" || got.auth != "Bearer t0k" || got.encoding != wantEncoding {
			t.Errorf("gzip %v: path %q, Content-Type %q, Authorization %q, Content-Encoding %q", gz, got.path, got.ctype, got.auth, got.encoding)
		}
		if n := len(got.data.ResourceSpans); n != 1 || got.data.ResourceSpans[0].ScopeSpans[0].Spans[0].Name != "GET /realty/:ref" {
			t.Errorf("gzip %v: the collector decoded %v", gz, &got.data)
		}
	}
}

// TestOTLPClientRetries checks the OTLP specification's retry rules: a 503
// is sent again, after the collector's Retry-After when it gives one; a
// 400 is not; and a collector that never answers costs an export its
// timeout, not more.
func TestOTLPClientRetries(t *testing.T) {
	tests := []struct {
		name       string
		statuses   []int // answered in turn; then 200
		retryAfter string
		wantCalls  int32
		wantErr    string
	}{
		{name: "503 then 200", statuses: []int{503}, wantCalls: 2},
		{name: "429 with Retry-After", statuses: []int{429}, retryAfter: "1", wantCalls: 2},
		{name: "400 is final", statuses: []int{400}, wantCalls: 1, wantErr: "400"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := int(calls.Add(1))
				if n <= len(tt.statuses) {
					w.Header().Set("Retry-After", tt.retryAfter)
					w.WriteHeader(tt.statuses[n-1])
				}
			}))
			defer srv.Close()
			c, err := newOTLPClient(config.OTLPExport{URL: srv.URL, Timeout: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			c.firstWait = 10 * time.Millisecond
			err = c.UploadTraces(context.Background(), someSpans("x"))
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("UploadTraces = %v, want %q", err, tt.wantErr)
			}
			if got := calls.Load(); got != tt.wantCalls {
				t.Errorf("the collector was called %d times, want %d", got, tt.wantCalls)
			}
		})
	}
	t.Run("a Retry-After past the timeout", func(t *testing.T) {
		var calls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		defer srv.Close()
		const timeout = 2 * time.Second
		c, err := newOTLPClient(config.OTLPExport{URL: srv.URL, Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = c.UploadTraces(context.Background(), someSpans("x"))
		if took := time.Since(start); err == nil || took >= timeout || calls.Load() != 1 {
			t.Errorf("UploadTraces = %v after %v and %d calls; want the error at once, after one call", err, took, calls.Load())
		}
	})
	t.Run("a collector that hangs", func(t *testing.T) {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
		defer srv.Close()
		defer close(release)
		const timeout = 100 * time.Millisecond
		c, err := newOTLPClient(config.OTLPExport{URL: srv.URL, Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = c.UploadTraces(context.Background(), someSpans("x"))
		if took := time.Since(start); err == nil || took > 10*timeout {
			t.Errorf("UploadTraces = %v after %v; want an error within %v", err, took, 10*timeout)
		}
	})
}
