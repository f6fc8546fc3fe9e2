package gateway

import (
	"runtime"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// BenchmarkViewTokenAlgorithms compares the hot hit by the token's
// algorithm (the verified token is remembered, so the signature is checked
// once), a request whose token is verified every time (the first request of
// a new token), and a stream of distinct tokens each seen once (logins of
// many clients: verified, then remembered, evicting others). The bench
// reports what verifying costs beside the cache hit.
func BenchmarkViewTokenAlgorithms(b *testing.B) {
	for _, alg := range []string{"HS256", "EdDSA", "ES256"} {
		o := fixtureOptions{change: func(c *Config) { c.AccessLog = "off" }}
		if alg != "HS256" {
			o.tokenAlg = alg
		}
		f := newFixtureOf(b, o)
		handler := servedHandler(f.app)
		issue := func() string {
			tok, err := f.srv.issueToken(1, 1, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			return "Bearer " + tok
		}
		auth := issue()
		run := func(b *testing.B, next func() string, forget bool) {
			var ctx fasthttp.RequestCtx
			b.ReportAllocs()
			for b.Loop() {
				if forget {
					f.srv.verified.InvalidateAll()
				}
				resetGet(&ctx, "/realty/1", next(), "")
				handler(&ctx)
				if ctx.Response.StatusCode() != 200 {
					b.Fatalf("status %d", ctx.Response.StatusCode())
				}
			}
		}
		same := func() string { return auth }
		var fill fasthttp.RequestCtx
		resetGet(&fill, "/realty/1", auth, "")
		handler(&fill) // fill the cache
		b.Run(alg+"/hot hit", func(b *testing.B) { run(b, same, false) })
		b.Run(alg+"/verified every time", func(b *testing.B) { run(b, same, true) })
		b.Run(alg+"/distinct tokens", func(b *testing.B) {
			// More than the memory holds: cycling through them, each use
			// finds its token forgotten, as a stream of new clients would.
			tokens := make([]string, verifiedTokens*6/5)
			for i := range tokens {
				tokens[i] = issue()
			}
			i := 0
			run(b, func() string { i++; return tokens[i%len(tokens)] }, false)
		})
	}
}

// BenchmarkVerifiedTokenMemory reports what the verified-token memory
// holds when full: verifiedTokens distinct EdDSA tokens.
func BenchmarkVerifiedTokenMemory(b *testing.B) {
	f := newFixtureOf(b, fixtureOptions{tokenAlg: "EdDSA", change: func(c *Config) { c.AccessLog = "off" }})
	handler := servedHandler(f.app)
	tokens := make([]string, verifiedTokens+verifiedTokens/10)
	for i := range tokens {
		tok, err := f.srv.issueToken(1, 1, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		tokens[i] = "Bearer " + tok
	}
	var before, after runtime.MemStats
	for b.Loop() {
		f.srv.verified.InvalidateAll()
		runtime.GC()
		runtime.ReadMemStats(&before)
		var ctx fasthttp.RequestCtx
		for _, tok := range tokens {
			resetGet(&ctx, "/realty/1", tok, "")
			handler(&ctx)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
	}
	n := f.srv.verified.EstimatedSize()
	b.ReportMetric(float64(n), "tokens")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "B/token")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB")
	if n > verifiedTokens {
		b.Fatalf("%d tokens remembered; the bound is %d", n, verifiedTokens)
	}
}
