package gateway

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkView measures one cached listing view through the whole app:
// routing, the token check, the cache hit and the headers. It compares the
// remembered-token path with verifying the JWT on every request, and with
// the same app refusing a request before any token work, which is the
// fixed cost of Fiber.
func BenchmarkView(b *testing.B) {
	f := newFixture(b)
	handler := f.app.Handler()
	auth := bearer(b, 1, 1)

	run := func(b *testing.B, path, authorization string, want int, forget bool) {
		var ctx fasthttp.RequestCtx
		b.ReportAllocs()
		for b.Loop() {
			if forget {
				f.srv.verified.Purge()
			}
			ctx.Request.Reset()
			ctx.Response.Reset()
			ctx.Request.SetRequestURI(path)
			ctx.Request.Header.SetMethod(fasthttp.MethodGet)
			if authorization != "" {
				ctx.Request.Header.Set(fasthttp.HeaderAuthorization, authorization)
			}
			handler(&ctx)
			if ctx.Response.StatusCode() != want {
				b.Fatalf("status %d, want %d", ctx.Response.StatusCode(), want)
			}
		}
	}
	run(b, "/realty/1", auth, 200, false) // fill the cache
	b.Run("view hit", func(b *testing.B) { run(b, "/realty/1", auth, 200, false) })
	b.Run("view hit, token verified each time", func(b *testing.B) { run(b, "/realty/1", auth, 200, true) })
	b.Run("baseline: refused without token", func(b *testing.B) { run(b, "/realty/1", "", 401, false) })
}
