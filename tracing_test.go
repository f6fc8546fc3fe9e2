package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/coding"
	"github.com/realty-gateway/gateway/gateway"
	"github.com/realty-gateway/gateway/internal/config"
	"github.com/realty-gateway/gateway/internal/demo"
	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/upstream"
)

// spanTree renders the spans of one trace, children indented under their
// parent in start order. The spans of the Redis and PostgreSQL
// instrumentations are shown as "redis" and "postgres", without their
// children and once for a run of siblings: which of them there are depends
// on the state of the connection pools (dials, handshakes, prepares).
func spanTree(spans tracetest.SpanStubs, root tracetest.SpanStub) string {
	children := map[string][]tracetest.SpanStub{}
	for _, s := range spans {
		if s.Parent.IsValid() {
			id := s.Parent.SpanID().String()
			children[id] = append(children[id], s)
		}
	}
	var b strings.Builder
	var walk func(s tracetest.SpanStub, depth int)
	walk = func(s tracetest.SpanStub, depth int) {
		kids := children[s.SpanContext.SpanID().String()]
		slices.SortStableFunc(kids, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
		var last string
		for _, k := range kids {
			label := spanLabel(k)
			if label == last && (label == "redis" || label == "postgres") {
				continue
			}
			last = label
			fmt.Fprintf(&b, "%s%s\n", strings.Repeat("  ", depth), label)
			if label != "redis" && label != "postgres" {
				walk(k, depth+1)
			}
		}
	}
	fmt.Fprintf(&b, "%s\n", spanLabel(root))
	walk(root, 1)
	return b.String()
}

func spanLabel(s tracetest.SpanStub) string {
	switch scope := s.InstrumentationScope.Name; {
	case strings.Contains(scope, "redisotel"):
		return "redis"
	case strings.Contains(scope, "otelpgx"):
		return "postgres"
	}
	for _, a := range s.Attributes {
		if a.Key == "cache.hit" {
			return fmt.Sprintf("%s hit=%v", s.Name, a.Value.AsBool())
		}
	}
	return s.Name
}

// TestTraceSpanTrees drives a login, a miss and a cached read through the
// gateway as serve assembles it, on PostgreSQL and Redis, with an
// in-memory exporter, and checks each request's span tree; each request
// joins the trace of its traceparent, and its access line names it.
func TestTraceSpanTrees(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A Redis of its own: other packages' tests flush the shared one's
	// scripts (cache's TestGuardedSetsSurviveAScriptFlush), which adds the
	// EVAL of the NOSCRIPT fallback under "cache set", and cut its pub/sub
	// connections (e2e's TestEndToEndLocalTierSubscriptionLoss), which
	// turns the local tier off and empties it.
	node := testenv.StartRedis(t, "redis")
	cfg, err := config.Load(map[string]string{
		"GATEWAY_STORE_URL":    testenv.PostgresURL(t),
		"GATEWAY_REDIS_URL":    "redis://" + node.Addr + "/0",
		"GATEWAY_REDIS_PREFIX": testenv.RandomName("trace") + ":",
		"GATEWAY_JWT_SECRET":   "trace-secret-trace-secret-trace-secret",
		"GATEWAY_ACCESS_LOG":   "all",
		// The miss's entry must outlast the pause before the cached read
		// on a busy machine (the default is 2 s).
		"GATEWAY_LOCAL_CACHE_MAX_AGE": "1m",
	})
	if err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	var logs lockedBuffer // background goroutines log too
	p, err := assemble(ctx, cfg, tp, nil, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	go p.listings.Run(ctx)
	<-p.listings.Subscribed()
	// The trees below are those of a gateway with its local tier on; on a
	// busy machine that can take a while after the subscription.
	testenv.Eventually(t, "the local tier on", func() bool { return p.listings.Stats().LocalTierOn })

	key, _ := gateway.NewAPIKey()
	firm, err := p.store.AddFirm(ctx, "Trace Realty", gateway.KeyDigest(key))
	if err != nil {
		t.Fatal(err)
	}
	hash, _ := gateway.HashPassword("trace-password")
	user, err := p.store.AddUser(ctx, upstream.User{FirmID: firm.ID, Email: "agent@trace.example", PasswordHash: hash})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := p.store.ImportListings(ctx, demo.Listings(firm.ID, user.ID)[:2])
	if err != nil {
		t.Fatal(err)
	}
	// A miss of another listing loads the cache's scripts into this new
	// Redis: the trees below are those of a Redis that holds them.
	if _, err := p.listings.Get(ctx, cache.ByID(stored[1].ID), coding.Identity, time.Now()); err != nil {
		t.Fatal(err)
	}
	app := p.srv.App()

	var tok string
	tests := []struct {
		name       string
		give       func() *http.Request
		wantStatus int
		want       string
	}{
		{
			name: "login",
			give: func() *http.Request {
				r := httptest.NewRequest(http.MethodPost, "/auth/login",
					strings.NewReader(fmt.Sprintf(`{"email":"agent@trace.example","password":"trace-password","key":%q}`, key)))
				r.Header.Set("Content-Type", "application/json")
				return r
			},
			wantStatus: 200,
			want: `POST /auth/login
  redis
  store firm_by_key
    postgres
  redis
  store user_by_email
    postgres
  password verify
  redis
`,
		},
		{
			name: "miss",
			give: func() *http.Request {
				return httptest.NewRequest(http.MethodGet, fmt.Sprintf("/realty/%d", stored[0].ID), nil)
			},
			wantStatus: 200,
			want: `GET /realty/:ref
  cache local hit=false
  cache singleflight
    cache get
    store listing_by_id
      postgres
    cache set
`,
		},
		{
			name: "cached read",
			give: func() *http.Request {
				return httptest.NewRequest(http.MethodGet, fmt.Sprintf("/realty/%d", stored[0].ID), nil)
			},
			wantStatus: 200,
			want: `GET /realty/:ref
  cache local hit=true
`,
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exp.Reset()
			logs.Reset()
			traceID := fmt.Sprintf("4bf92f3577b34da6a3ce929d0e0e%04x", i+1)
			req := tt.give()
			req.Header.Set("User-Agent", "trace-test")
			req.Header.Set("Traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
			if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			resp, err := app.Test(req, -1)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if tok == "" {
				var out struct{ JWTToken string }
				_ = json.Unmarshal(body, &out)
				tok = out.JWTToken
			}
			spans := exp.GetSpans()
			var roots []tracetest.SpanStub
			for _, s := range spans {
				if got := s.SpanContext.TraceID().String(); got != traceID {
					// The cache's writes to Redis go through its
					// auto-pipeline without waiting, in traces of their
					// own, and may end within any request's spans.
					if spanLabel(s) != "redis" {
						t.Errorf("span %q is in trace %s, not the request's %s", s.Name, got, traceID)
					}
					continue
				}
				if s.Parent.IsRemote() {
					roots = append(roots, s)
				}
			}
			if len(roots) != 1 || roots[0].Parent.SpanID().String() != "00f067aa0ba902b7" {
				t.Fatalf("want one server span whose parent is the traceparent's span, got %d", len(roots))
			}
			if got := spanTree(spans, roots[0]); got != tt.want {
				t.Errorf("span tree:\n%s\nwant:\n%s\nlocal tier on: %v; log:\n%s", got, tt.want, p.listings.Stats().LocalTierOn, logs.String())
			}
			if !strings.Contains(logs.String(), `"msg":"request"`) || !strings.Contains(logs.String(), `"traceId":"`+traceID+`"`) {
				t.Errorf("the access line does not name the trace:\n%s", logs.String())
			}
		})
	}
}

// lockedBuffer is a bytes.Buffer that the logger's background writers and
// the test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *lockedBuffer) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Reset()
}
