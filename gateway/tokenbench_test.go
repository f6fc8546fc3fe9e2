package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
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

// BenchmarkServedHotHitByToken serves the hot hit on one kept-alive
// connection through fasthttp's server and the gateway's Listener conn
// (in memory: no kernel), read with tokens of each algorithm, and with an
// HS256 token padded (an unchecked claim) to the EdDSA token's length: it
// is what a request costs in the gateway's own code, parsing included, by
// the token's algorithm and size.
func BenchmarkServedHotHitByToken(b *testing.B) {
	off := func(c *Config) { c.AccessLog = "off" }
	fixtures := map[string]fixture{}
	tokens := map[string]string{}
	for _, alg := range []string{"HS256", "EdDSA", "ES256"} {
		o := fixtureOptions{change: off}
		if alg != "HS256" {
			o.tokenAlg = alg
		}
		f := newFixtureOf(b, o)
		tok, err := f.srv.issueToken(1, 1, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		fixtures[alg], tokens[alg] = f, tok
	}
	padded, err := padHS256(tokens["HS256"], len(tokens["EdDSA"]))
	if err != nil {
		b.Fatal(err)
	}
	fixtures["HS256-padded"], tokens["HS256-padded"] = fixtures["HS256"], padded
	for _, name := range []string{"HS256", "HS256-padded", "EdDSA", "ES256"} {
		f, tok := fixtures[name], tokens[name]
		req := []byte("GET /realty/1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAuthorization: Bearer " + tok + "\r\n\r\n")
		f.app.Handler() // builds the routes
		srv := f.app.Server()
		serve := func(n int) *requestsConn {
			c := &requestsConn{req: req, left: n}
			if err := srv.ServeConn(&conn{Conn: c}); err != nil {
				b.Fatal(err)
			}
			if c.served != n || !bytes.HasPrefix(c.last, []byte("HTTP/1.1 200 ")) {
				b.Fatalf("%s: %d of %d answered, the last %q", name, c.served, n, c.last)
			}
			return c
		}
		serve(2) // verify the token, fill the cache
		b.Run(fmt.Sprintf("%s/%d B", name, len(tok)), func(b *testing.B) {
			b.ReportAllocs()
			b.ResetTimer()
			serve(b.N)
		})
	}
}

// BenchmarkTokenMemoLayers serves the EdDSA hot hit as
// BenchmarkServedHotHitByToken does, with the token found on the
// connection (Listener's conn: the connection memo), and through a bare
// connection, on which every request looks the token up in the shared
// memory of verified tokens: what the first layer saves on every request
// of a kept-alive connection (docs/performance.md).
func BenchmarkTokenMemoLayers(b *testing.B) {
	f := newFixtureOf(b, fixtureOptions{tokenAlg: "EdDSA", change: func(c *Config) { c.AccessLog = "off" }})
	tok, err := f.srv.issueToken(1, 1, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	req := []byte("GET /realty/1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAuthorization: Bearer " + tok + "\r\n\r\n")
	f.app.Handler() // builds the routes
	srv := f.app.Server()
	serve := func(n int, wrap bool) {
		c := &requestsConn{req: req, left: n}
		var nc net.Conn = c
		if wrap {
			nc = &conn{Conn: c}
		}
		if err := srv.ServeConn(nc); err != nil {
			b.Fatal(err)
		}
		if c.served != n || !bytes.HasPrefix(c.last, []byte("HTTP/1.1 200 ")) {
			b.Fatalf("%d of %d answered, the last %q", c.served, n, c.last)
		}
	}
	serve(2, true) // verify the token, fill the cache and the shared memory
	for _, tt := range []struct {
		name string
		wrap bool
	}{{"connection memo", true}, {"shared memory only", false}} {
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			b.ResetTimer()
			serve(b.N, tt.wrap)
		})
	}
}

// requestsConn is a kept-alive connection that sends req left times, one
// per read, then EOF, and keeps the start of the last answer.
type requestsConn struct {
	benchConn
	req          []byte
	left, served int
	last         []byte
}

func (c *requestsConn) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, io.EOF
	}
	c.left--
	return copy(p, c.req), nil
}

func (c *requestsConn) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, []byte("HTTP/")) {
		c.served++
		c.last = append(c.last[:0], p...)
	}
	return len(p), nil
}

func (*requestsConn) Close() error                     { return nil }
func (*requestsConn) SetDeadline(time.Time) error      { return nil }
func (*requestsConn) SetReadDeadline(time.Time) error  { return nil }
func (*requestsConn) SetWriteDeadline(time.Time) error { return nil }

// padHS256 adds a claim "pad" to an HS256 token of the fixtures' secret,
// making it n characters long (or one more), and signs it again.
func padHS256(tok string, n int) (string, error) {
	parsed, _, err := jwt.NewParser().ParseUnverified(tok, jwt.MapClaims{})
	if err != nil {
		return "", err
	}
	claims := parsed.Claims.(jwt.MapClaims)
	for pad := 0; pad < n; pad++ {
		claims["pad"] = strings.Repeat("x", pad)
		t := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
		t.Header["kid"] = parsed.Header["kid"]
		s, err := t.SignedString(testSecret)
		if err != nil || len(s) >= n {
			return s, err
		}
	}
	return "", fmt.Errorf("cannot pad a %d-character token to %d", len(tok), n)
}
