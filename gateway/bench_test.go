package gateway

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/internal/logctx"
	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/metrics"
	"github.com/realty-gateway/gateway/upstream"
)

// BenchmarkView measures one cached listing view through the whole app:
// routing, the token check (signature or memory, then the revocations),
// the cache hit and the headers. It compares the
// remembered-token path with verifying the JWT on every request, and with
// the same app refusing a request before any token work, which is the
// fixed cost of Fiber.
func BenchmarkView(b *testing.B) {
	f := newFixtureWith(b, func(c *Config) { c.AccessLog = "off" }, NoPurge{})
	handler := servedHandler(f.app)
	auth := bearer(b, 1, 1)

	run := func(b *testing.B, path, authorization string, want int, forget bool) {
		var ctx fasthttp.RequestCtx
		b.ReportAllocs()
		for b.Loop() {
			if forget {
				f.srv.verified.InvalidateAll()
			}
			resetGet(&ctx, path, authorization, "")
			handler(&ctx)
			if ctx.Response.StatusCode() != want {
				b.Fatalf("status %d, want %d", ctx.Response.StatusCode(), want)
			}
		}
	}
	run(b, "/realty/1", auth, 200, false) // fill the cache
	b.Run("view hit", func(b *testing.B) { run(b, "/realty/1", auth, 200, false) })
	b.Run("view hit, as served: access log all at level warn, Prometheus metrics", func(b *testing.B) {
		// The defaults of a deployment that logs warnings only: the access
		// log is on (all), the logger drops its info lines.
		log, accessLog := f.srv.log, f.srv.cfg.AccessLog
		f.srv.log = slog.New(logctx.NewHandler(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})))
		f.srv.cfg.AccessLog, f.srv.obs = "all", metrics.New()
		defer func() { f.srv.log, f.srv.cfg.AccessLog, f.srv.obs = log, accessLog, nil }()
		run(b, "/realty/1", auth, 200, false)
	})
	b.Run("view hit, 1000 revocations in force, one of the token's firm", func(b *testing.B) {
		// The token check's worst case: the firm has a revocation (of
		// another user), so both the firm's and the user's are looked up.
		before := time.Now().Add(-time.Minute) // the token was issued after
		for i := range int64(1000) {
			f.revoked.Add(upstream.Revocation{FirmID: 100 + i, At: before})
		}
		f.revoked.Add(upstream.Revocation{FirmID: 1, UserID: 99, At: before})
		defer func() { f.revoked.Prune(time.Now().Add(time.Hour)) }()
		run(b, "/realty/1", auth, 200, false)
	})
	b.Run("view hit, access log to a JSON handler", func(b *testing.B) {
		f.srv.cfg.AccessLog = "all"
		defer func() { f.srv.cfg.AccessLog = "off" }()
		run(b, "/realty/1", auth, 200, false)
	})
	b.Run("view hit, Prometheus metrics", func(b *testing.B) {
		f.srv.obs = metrics.New()
		defer func() { f.srv.obs = nil }()
		run(b, "/realty/1", auth, 200, false)
	})
	b.Run("view hit, tracing on, every request sampled", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider() // spans recorded, then dropped
		f.srv.tracer, f.srv.propagator = tracing(tp)
		defer func() { f.srv.tracer, f.srv.propagator = nil, nil }()
		run(b, "/realty/1", auth, 200, false)
	})
	b.Run("view hit, token verified each time", func(b *testing.B) { run(b, "/realty/1", auth, 200, true) })
	b.Run("baseline: refused without token", func(b *testing.B) { run(b, "/realty/1", "", 401, false) })

	// The framework's ceiling: a bare Fiber handler sending the same bytes
	// from memory, no token, no cache.
	var body []byte
	{
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI("/realty/1")
		ctx.Request.Header.Set(fasthttp.HeaderAuthorization, auth)
		handler(&ctx)
		body = append(body, ctx.Response.Body()...)
	}
	bare := fiber.New(fiber.Config{DisableStartupMessage: true})
	bare.Get("/realty/:ref", func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Send(body)
	})
	bareHandler := bare.Handler()
	b.Run("baseline: bare Fiber handler, same bytes", func(b *testing.B) {
		var ctx fasthttp.RequestCtx
		b.ReportAllocs()
		for b.Loop() {
			resetGet(&ctx, "/realty/1", auth, "")
			bareHandler(&ctx)
			if ctx.Response.StatusCode() != 200 {
				b.Fatal(ctx.Response.StatusCode())
			}
		}
	})
}

// BenchmarkViewRedis measures the hot hit in the production shape: Redis
// configured, the listing answered by the local tier in front of it, the
// access log on (all) at level warn, Prometheus metrics. Its allocations
// per hit are the target of zero (TestHotHitAllocatesNothing holds it).
func BenchmarkViewRedis(b *testing.B) {
	serve, listings := newServedRedis(b)
	hits := listings.Stats().LocalHits
	serveHits(b, serve)
	if got := listings.Stats().LocalHits - hits; got < uint64(b.N) {
		b.Fatalf("%d of %d reads from the local tier", got, b.N)
	}
}

// BenchmarkViewEmbedded is BenchmarkViewRedis's hit without Redis: the
// in-process tier, the same request, handler and settings, so that the
// two compare the local tier with the embedded one (issue 41 wants the
// first at least 0.97 of the second).
func BenchmarkViewEmbedded(b *testing.B) {
	serveHits(b, newServed(b, fixtureOptions{change: func(c *Config) { c.AccessLog = "all" }}, nil))
}

// serveHits serves the hot listing b.N times, each a 200.
func serveHits(b *testing.B, serve func(*fasthttp.RequestCtx)) {
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	for b.Loop() {
		serve(&ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("status %d", ctx.Response.StatusCode())
		}
	}
}

// newServedRedis builds the gateway as served with Redis configured (the
// local tier in front of a real Redis, under a prefix of its own, emptied
// at the end; the access log all at level warn; Prometheus metrics) and
// returns a function that serves the hot listing on a request context, as
// fasthttp's server does, once the listing is in the local tier.
func newServedRedis(tb testing.TB) (serve func(*fasthttp.RequestCtx), listings *cache.Cache) {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(tb)})
	prefix := testenv.RandomName("bench-view-") + ":"
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(func() {
		cancel()
		_ = testenv.DeleteKeys(context.Background(), rdb, prefix+"*")
		rdb.Close()
	})
	serve = newServed(tb, fixtureOptions{
		change: func(c *Config) { c.AccessLog = "all" },
		cache: func(src cache.Source, log *slog.Logger) Listings {
			cfg := cache.DefaultConfig()
			cfg.LocalMaxAge = time.Hour // no trip to Redis meanwhile
			c, err := cache.NewRedis(rdb, time.Second, cfg, cache.Deps{Source: src, Log: log, LoadTimeout: time.Second, Prefix: prefix})
			if err != nil {
				tb.Fatal(err)
			}
			go c.Run(ctx)
			listings = c
			return c
		},
	}, func() bool { return listings.Stats().LocalTierOn })
	return serve, listings
}

// newServed builds the gateway of opts as served (the access log at level
// warn, Prometheus metrics) and returns a function that serves the hot
// listing on a request context, as fasthttp's server does, once ready
// reports true (nil: at once) and the listing is in memory.
func newServed(tb testing.TB, opts fixtureOptions, ready func() bool) (serve func(*fasthttp.RequestCtx)) {
	tb.Helper()
	f := newFixtureOf(tb, opts)
	if ready != nil {
		testenv.WaitFor(tb, ready)
	}
	f.srv.log = slog.New(logctx.NewHandler(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})))
	f.srv.obs = metrics.New()
	handler := servedHandler(f.app)
	auth := bearer(tb, 1, 1)
	serve = func(ctx *fasthttp.RequestCtx) {
		resetGet(ctx, "/realty/1", auth, "")
		handler(ctx)
	}
	var first, second fasthttp.RequestCtx
	serve(&first) // a miss: the store, then Redis where configured, and memory
	serve(&second)
	if got := string(second.Response.Header.Peek("X-Cache")); second.Response.StatusCode() != 200 || got != "HIT" {
		tb.Fatalf("second read: status %d, X-Cache %q", second.Response.StatusCode(), got)
	}
	return serve
}

// benchConn is the connection a benchmarked request arrived on: only its
// addresses are read.
type benchConn struct{ net.Conn }

func (benchConn) LocalAddr() net.Addr  { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080} }
func (benchConn) RemoteAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000} }

// resetGet makes ctx a new GET of path, as fasthttp's server does for each
// request (the request's time is read once, before the handler), with the
// Authorization and Accept-Encoding given (none where empty).
func resetGet(ctx *fasthttp.RequestCtx, path, authorization, acceptEncoding string) {
	ctx.Init2(benchConn{}, nil, false)
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.Request.SetRequestURI(path)
	ctx.Request.Header.SetMethod(fasthttp.MethodGet)
	if authorization != "" {
		ctx.Request.Header.Set(fasthttp.HeaderAuthorization, authorization)
	}
	if acceptEncoding != "" {
		ctx.Request.Header.Set(fasthttp.HeaderAcceptEncoding, acceptEncoding)
	}
}
