//go:build !race

package gateway

import (
	"io"
	"log/slog"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/realty-gateway/gateway/internal/logctx"
	"github.com/realty-gateway/gateway/metrics"
)

// TestHotHitAllocatesNothing holds issue 26's target: a cached view,
// answered from process memory with the access log on at level warn and
// the metrics observed, allocates nothing, with Redis configured (the
// local tier) and without (the in-process tier). (The race detector's
// instrumentation allocates: not under -race.)
func TestHotHitAllocatesNothing(t *testing.T) {
	// The identity body, and a compressed one (Chrome's Accept-Encoding:
	// gzip), made once and then only sent.
	for _, ae := range []string{"", "gzip, deflate, br, zstd"} {
		t.Run("embedded, Accept-Encoding "+ae, func(t *testing.T) {
			f := newFixture(t) // access log all
			f.srv.log = slog.New(logctx.NewHandler(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})))
			f.srv.obs = metrics.New()
			handler := servedHandler(f.app)
			auth := bearer(t, 1, 1)
			var ctx fasthttp.RequestCtx
			serve := func() {
				resetGet(&ctx, "/realty/1", auth, ae)
				handler(&ctx)
				if ctx.Response.StatusCode() != 200 {
					t.Fatalf("status %d", ctx.Response.StatusCode())
				}
			}
			serve() // fill the cache, the variant and the token memory
			if n := testing.AllocsPerRun(1000, serve); n != 0 {
				t.Errorf("a hot hit allocates %v times; want 0", n)
			}
		})
	}
	t.Run("Redis configured", func(t *testing.T) {
		serve, _ := newServedRedis(t)
		var ctx fasthttp.RequestCtx
		if n := testing.AllocsPerRun(1000, func() { serve(&ctx) }); n != 0 {
			t.Errorf("a hot hit allocates %v times; want 0", n)
		}
	})
}
