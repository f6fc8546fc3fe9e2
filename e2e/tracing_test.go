package e2e

import (
	"encoding/hex"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/realty-gateway/gateway/internal/testenv"
)

// collector is an OTLP/HTTP trace receiver: it keeps the names of the
// spans it is sent, by trace id.
type collector struct {
	mu    sync.Mutex
	paths []string
	spans map[string][]string // trace id (hex) -> span names
}

func newCollector(t *testing.T) (*collector, string) {
	c := &collector{spans: map[string][]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req tracepb.TracesData // wire-compatible with ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.paths = append(c.paths, r.URL.Path)
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					id := hex.EncodeToString(s.TraceId)
					c.spans[id] = append(c.spans[id], s.Name)
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(srv.Close)
	return c, srv.URL
}

func (c *collector) trace(id string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.spans[id]...)
}

// TestEndToEndTracesExported runs the binary with GATEWAY_OTLP_ENDPOINT
// at a local OTLP/HTTP receiver: a view's spans arrive in the trace of its
// traceparent, at /v1/traces, within the batch delay that
// OTEL_BSP_SCHEDULE_DELAY sets; with OTEL_TRACES_SAMPLER=always_off none
// do; without an endpoint the gateway sends nothing.
func TestEndToEndTracesExported(t *testing.T) {
	tests := []struct {
		name      string
		give      map[string]string // besides the store, Redis and the JWT secret
		wantSpans bool
	}{
		{name: "on", give: map[string]string{"GATEWAY_OTLP_ENDPOINT": "<collector>", "OTEL_BSP_SCHEDULE_DELAY": "100"}, wantSpans: true},
		{name: "standard variable", give: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "<collector>", "OTEL_BSP_SCHEDULE_DELAY": "100"}, wantSpans: true},
		{name: "sampled off", give: map[string]string{"GATEWAY_OTLP_ENDPOINT": "<collector>", "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_TRACES_SAMPLER": "always_off"}},
		{name: "SDK disabled", give: map[string]string{"GATEWAY_OTLP_ENDPOINT": "<collector>", "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_SDK_DISABLED": "true"}},
		{name: "no endpoint", give: map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "100"}},
	}
	e, _ := postgresEnv(t, testenv.PostgresURL(t), testenv.RedisAddr(t))
	w := newWorld(t, e)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, url := newCollector(t)
			env := maps.Clone(e)
			for k, v := range tt.give {
				if v == "<collector>" {
					v = url
				}
				env[k] = v
			}
			p := start(t, env)
			tok := p.token(t, w.otpLogin())
			traceID := "0af7651916cd43dd8448eb211c80319" + string(rune('a'+i))
			r := p.request(t, http.MethodGet, "/realty/1001", map[string]string{"Authorization": "Bearer " + tok,
				"Traceparent": "00-" + traceID + "-b7ad6b7169203331-01"}, "")
			if r.status != http.StatusOK {
				t.Fatalf("view: %d %s", r.status, r.body)
			}
			if !tt.wantSpans {
				time.Sleep(500 * time.Millisecond) // five batch delays
				if got := c.trace(traceID); len(got) != 0 {
					t.Fatalf("spans exported: %v", got)
				}
				return
			}
			// The default batch delay is 5 s: spans before it show that
			// OTEL_BSP_SCHEDULE_DELAY (100 ms) was honoured. 4.5 s leaves a
			// busy machine 44 times the delay; how soon is logged.
			arrived := func() bool {
				for _, name := range c.trace(traceID) {
					if name == "GET /realty/:ref" {
						return true
					}
				}
				return false
			}
			viewed := time.Now()
			for deadline := viewed.Add(4500 * time.Millisecond); !arrived(); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the view's span did not arrive within 4.5 s, before the default 5 s batch delay; its trace holds %v", c.trace(traceID))
				}
			}
			t.Logf("the view's span arrived %v after the view", time.Since(viewed).Round(time.Millisecond))
			c.mu.Lock()
			defer c.mu.Unlock()
			for _, path := range c.paths {
				if path != "/v1/traces" {
					t.Errorf("exported to %s, want /v1/traces", path)
				}
			}
		})
	}
}
