package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/gatewaytest"
	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/ratelimit"
	"github.com/realty-gateway/gateway/upstream"
)

func TestCompressedBodiesAreRefused(t *testing.T) {
	f := newFixture(t)
	auth := bearer(t, 1, 1)
	login := []byte(loginBody("pw@one.example", testPassword, testKey))
	gzipLogin := gatewaytest.GzipBomb(10, 1) // a small login, gzipped
	routes := []struct {
		method, path, auth string
	}{
		{method: http.MethodPost, path: "/auth/login"},
		{method: http.MethodPost, path: "/realty", auth: auth},
		{method: http.MethodPut, path: "/realty/1", auth: auth},
	}
	tests := []struct {
		name string
		give []string // Content-Encoding lines
		body []byte
	}{
		{name: "gzip", give: []string{"gzip"}, body: gzipLogin},
		{name: "deflate", give: []string{"deflate"}, body: login},
		{name: "br", give: []string{"br"}, body: login},
		{name: "chained", give: []string{"gzip, gzip"}, body: gatewaytest.GzipBomb(10, 2)},
		{name: "upper case", give: []string{"GZIP"}, body: gzipLogin},
		{name: "identity, then gzip", give: []string{"identity, gzip"}, body: gzipLogin},
		{name: "second header line", give: []string{"identity", "gzip"}, body: gzipLogin},
		{name: "unknown coding", give: []string{"zstd"}, body: login},
	}
	for _, r := range routes {
		for _, tt := range tests {
			t.Run(r.method+" "+r.path+"/"+tt.name, func(t *testing.T) {
				req := httptest.NewRequest(r.method, r.path, bytes.NewReader(tt.body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("User-Agent", "test")
				if r.auth != "" {
					req.Header.Set("Authorization", r.auth)
				}
				for _, line := range tt.give {
					req.Header.Add("Content-Encoding", line)
				}
				resp, body := f.do(t, req)
				if resp.StatusCode != http.StatusUnsupportedMediaType || resp.Header.Get("Content-Type") != "application/problem+json" {
					t.Fatalf("status %d (%s), want 415 problem+json: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
				}
				if resp.Header.Get("Accept-Encoding") != "identity" || !strings.Contains(body, "identity") {
					t.Fatalf("Accept-Encoding %q, body %s: want the supported coding named", resp.Header.Get("Accept-Encoding"), body)
				}
			})
		}
	}
	t.Run("identity is accepted", func(t *testing.T) {
		resp, body := f.login(t, string(login), map[string]string{"Content-Encoding": "identity"})
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	})
}

// TestCompressionBombDoesNotInflate sends a login whose body is a 64 MiB
// JSON string compressed twice (about 70 KiB on the wire at most) and
// expects the process's allocations to stay far below the inflated size.
func TestCompressionBombDoesNotInflate(t *testing.T) {
	f := newFixture(t)
	bomb := gatewaytest.GzipBomb(64<<20, 2)
	if len(bomb) > 1<<20 {
		t.Fatalf("bomb of %d bytes does not fit the body limit", len(bomb))
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var statuses []int
	for range 4 {
		req := httptest.NewRequest(http.MethodPost, "/auth/login", bytes.NewReader(bomb))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "test")
		req.Header.Set("Content-Encoding", "gzip, gzip")
		resp, _ := f.do(t, req)
		statuses = append(statuses, resp.StatusCode)
	}
	runtime.ReadMemStats(&after)
	grew := after.TotalAlloc - before.TotalAlloc
	if grew > 16<<20 {
		t.Fatalf("four bombs allocated %d MiB; the body was inflated", grew>>20)
	}
	t.Logf("four %d-byte bombs (64 MiB inflated) allocated %d KiB", len(bomb), grew>>10)
	for _, s := range statuses {
		if s != http.StatusUnsupportedMediaType {
			t.Fatalf("statuses %v, want 415", statuses)
		}
	}
}

// TestOnlyJSONBodyReadsTheBody keeps every handler on jsonBody: Fiber's
// Ctx.Body inflates compressed bodies without a bound.
func TestOnlyJSONBodyReadsTheBody(t *testing.T) {
	files, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	call := regexp.MustCompile(`\.Body\(\)`)
	for _, e := range files {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			if call.MatchString(line) && !strings.Contains(line, "Response().Body()") &&
				!(name == "body.go" && strings.Contains(line, "c.Request().Body()")) {
				t.Errorf("%s:%d reads a body outside jsonBody: %s", name, i+1, strings.TrimSpace(line))
			}
		}
	}
}

func TestPanicBecomesAProblem(t *testing.T) {
	var logged bytes.Buffer
	f := newFixtureOf(t, fixtureOptions{log: &logged})
	f.app.Get("/test-only/panic", func(*fiber.Ctx) error { panic("internal detail 1f2e3d") })

	req := httptest.NewRequest(http.MethodGet, "/test-only/panic", nil)
	req.Header.Set(headerRequestID, "trace-me-42")
	resp, body := f.do(t, req)
	if resp.StatusCode != 500 || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("status %d (%s): %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if strings.Contains(body, "1f2e3d") || strings.Contains(body, "goroutine") {
		t.Fatalf("the body shows internals: %s", body)
	}
	if resp.Header.Get(headerRequestID) != "trace-me-42" {
		t.Fatalf("X-Request-ID %q, want the incoming one", resp.Header.Get(headerRequestID))
	}
	if got := f.srv.Panics(); got != 1 {
		t.Fatalf("Panics() = %d, want 1", got)
	}
	var errorLines []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(logged.Bytes()), []byte("\n")) {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["level"] == "ERROR" {
			errorLines = append(errorLines, rec)
		}
	}
	if len(errorLines) != 1 {
		t.Fatalf("%d error lines, want 1: %s", len(errorLines), logged.String())
	}
	rec := errorLines[0]
	stack, _ := rec["stack"].(string)
	if rec["requestId"] != "trace-me-42" || !strings.Contains(stack, "hardening_test.go") {
		t.Fatalf("error line without request id or stack: %v", rec)
	}

	// The process goes on serving.
	if resp, body := f.get(t, "/realty/1", bearer(t, 1, 1)); resp.StatusCode != 200 {
		t.Fatalf("after the panic: status %d: %s", resp.StatusCode, body)
	}
}

func TestRequestID(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name string
		give string
		keep bool
	}{
		{name: "well formed is echoed", give: "abc-DEF_1.2:3", keep: true},
		{name: "absent is generated"},
		{name: "bad characters are replaced", give: "a b<script>"},
		{name: "too long is replaced", give: strings.Repeat("a", maxRequestIDLen+1)},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/realty/1", nil) // a 401: errors carry it too
			if tt.give != "" {
				req.Header.Set(headerRequestID, tt.give)
			}
			resp, _ := f.do(t, req)
			got := resp.Header.Get(headerRequestID)
			switch {
			case tt.keep && got != tt.give:
				t.Fatalf("X-Request-ID %q, want %q", got, tt.give)
			case !tt.keep && (got == "" || got == tt.give || !validRequestID([]byte(got)) || seen[got]):
				t.Fatalf("X-Request-ID %q: want a fresh, well-formed id", got)
			}
			seen[got] = true
		})
	}
}

// countingAccounts counts firm lookups by API key.
type countingAccounts struct {
	Accounts
	firmLookups atomic.Int64
}

func (a *countingAccounts) FirmByKeyDigest(ctx context.Context, digest []byte) (upstream.Firm, error) {
	a.firmLookups.Add(1)
	return a.Accounts.FirmByKeyDigest(ctx, digest)
}

func randomKey(t testing.TB) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "rk_" + hex.EncodeToString(b)
}

// loginFrom logs in as a client behind a trusted proxy, with the given
// X-Forwarded-For lines.
func (f fixture) loginFrom(t *testing.T, body string, xff ...string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/auth/login", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "test")
	for _, line := range xff {
		req.Header.Add("X-Forwarded-For", line)
	}
	return f.do(t, req)
}

func trustAll(c *Config) { c.TrustedProxies = []string{"0.0.0.0/32"} }

// TestUnknownKeysDoNotStarveRealLogins floods logins with random keys from
// many addresses, with the production wait for a hashing slot and a slot
// for each real login, while real password logins go on: none of them may
// be refused, which only the flood taking slots could cause. (With fewer
// slots than real logins, a real one would wait for another's hash, whose
// time depends on the machine, not on the flood.)
func TestUnknownKeysDoNotStarveRealLogins(t *testing.T) {
	const realLogins = 5
	f := newFixtureWith(t, func(c *Config) {
		trustAll(c)
		c.Login.HashConcurrency, c.Login.HashWait = realLogins, 250*time.Millisecond
	}, NoPurge{})
	var wg sync.WaitGroup
	statuses := make(chan int, 605)
	for i := range 600 {
		wg.Go(func() {
			resp, _ := f.loginFrom(t, loginBody("pw@one.example", "guess", randomKey(t)), fmt.Sprintf("198.51.%d.%d", i/250, i%250))
			statuses <- resp.StatusCode
		})
	}
	var real []time.Duration
	var mu sync.Mutex
	began := time.Now()
	for i := range realLogins {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 5 * time.Millisecond)
			sent := time.Now()
			resp, body := f.loginFrom(t, loginBody("pw@one.example", testPassword, testKey), fmt.Sprintf("203.0.113.%d", i))
			mu.Lock()
			defer mu.Unlock()
			real = append(real, time.Since(sent).Round(time.Millisecond))
			if resp.StatusCode != 200 {
				t.Errorf("real login %d during the flood: status %d: %s", i, resp.StatusCode, body)
			}
		})
	}
	wg.Wait()
	t.Logf("600 random-key logins and 5 real ones in %v; the real ones took %v", time.Since(began).Round(time.Millisecond), real)
	close(statuses)
	for s := range statuses {
		if s != http.StatusUnauthorized {
			t.Fatalf("a random key got %d, want 401", s)
		}
	}
	if len(real) != 5 {
		t.Fatalf("%d real logins finished", len(real))
	}
}

// TestUnknownKeyBudget: past Login.UnknownKeyAttempts, logins with keys that
// have not resolved lately are 429 without a store lookup; a key that
// resolved before goes on.
func TestUnknownKeyBudget(t *testing.T) {
	var counted *countingAccounts
	f := newFixtureOf(t, fixtureOptions{
		change: func(c *Config) { c.Login.UnknownKeyAttempts, c.Login.LimitPeriod = 20, time.Hour },
		accounts: func(a Accounts) Accounts {
			counted = &countingAccounts{Accounts: a}
			return counted
		},
	})
	if resp, body := f.login(t, loginBody("pw@one.example", testPassword, testKey), nil); resp.StatusCode != 200 {
		t.Fatalf("first real login: %d %s", resp.StatusCode, body)
	}
	// The real login's lookup was given back: 20 unknown keys still fit.
	got := map[int]int{}
	for range 30 {
		resp, _ := f.login(t, loginBody("pw@one.example", "x", randomKey(t)), nil)
		got[resp.StatusCode]++
	}
	if got[401] != 20 || got[429] != 10 {
		t.Fatalf("statuses %v, want 20×401 then 10×429", got)
	}
	if n := counted.firmLookups.Load(); n != 21 {
		t.Fatalf("%d firm lookups, want 21: none past the budget", n)
	}
	if resp, body := f.login(t, loginBody("pw@one.example", testPassword, testKey), nil); resp.StatusCode != 200 {
		t.Fatalf("a key that resolved lately, during the flood: %d %s", resp.StatusCode, body)
	}
	if resp, _ := f.login(t, loginBody("pw@two.example", testPassword, otherKey), nil); resp.StatusCode != 429 {
		t.Fatalf("a key not seen lately, past the budget: %d, want 429", resp.StatusCode)
	}
}

// TestAccountLimitCannotBeRaced sends 120 wrong passwords for one account
// at once from 120 addresses: only the limit's 20 may be judged.
func TestAccountLimitCannotBeRaced(t *testing.T) {
	limiters := map[string]func(t *testing.T) RateLimiter{
		"in process": func(*testing.T) RateLimiter { return nil },
		"redis": func(t *testing.T) RateLimiter {
			rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisOrStandIn(t), ContextTimeoutEnabled: true})
			prefix := testenv.RandomName("gwtest") + ":"
			t.Cleanup(func() {
				ctx := context.Background()
				if keys, _ := rdb.Keys(ctx, "rate:"+prefix+"*").Result(); len(keys) > 0 {
					rdb.Del(ctx, keys...)
				}
				rdb.Close()
			})
			l, err := ratelimit.New(rdb, prefix, time.Second, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
	}
	for name, limiter := range limiters {
		t.Run(name, func(t *testing.T) {
			f := newFixtureOf(t, fixtureOptions{limiter: limiter(t), change: func(c *Config) {
				trustAll(c)
				c.Login.AccountFailures, c.Login.LimitPeriod = 20, time.Hour
				// Twenty argon2id checks under -race may outlast the
				// fixture's 2 s request deadline: the limit is what is tested.
				c.Login.HashConcurrency, c.Login.HashWait, c.RequestTimeout = 4, time.Minute, time.Minute
			}})
			var wg sync.WaitGroup
			var mu sync.Mutex
			got := map[int]int{}
			for i := range 120 {
				wg.Go(func() {
					resp, _ := f.loginFrom(t, loginBody("pw@one.example", "wrong", testKey), fmt.Sprintf("198.51.100.%d", i))
					mu.Lock()
					got[resp.StatusCode]++
					mu.Unlock()
				})
			}
			wg.Wait()
			if got[401] > 20 || got[401] == 0 || got[401]+got[429] != 120 {
				t.Fatalf("statuses %v: want at most 20 judged (401), the rest 429", got)
			}
			if resp, _ := f.login(t, loginBody("pw@one.example", testPassword, testKey), nil); resp.StatusCode != 429 {
				t.Fatalf("the right password after the limit: %d, want 429", resp.StatusCode)
			}
		})
	}
}

func TestClientAddressBehindProxies(t *testing.T) {
	tests := []struct {
		name   string
		prefix int
		give   [][]string // X-Forwarded-For lines of consecutive logins
		want   []int
	}{
		{name: "lines are joined in order: the proxy's appended line counts",
			give: [][]string{{"6.6.6.6", "7.7.7.7"}, {"5.5.5.5", "7.7.7.7"}}, want: []int{200, 429}},
		{name: "ports are stripped",
			give: [][]string{{"7.7.7.7:4711"}, {"8.8.8.8:1"}, {"7.7.7.7:4712"}}, want: []int{200, 200, 429}},
		{name: "bracketed IPv6 with a port",
			give: [][]string{{"[2001:db8:1::1]:443"}, {"2001:db8:2::1"}, {"2001:db8:1::2"}}, want: []int{200, 200, 429}},
		{name: "IPv6 counts per /64",
			give: [][]string{{"2001:db8::1"}, {"2001:db8:0:1::1"}, {"2001:db8::ffff:1"}}, want: []int{200, 200, 429}},
		{name: "IPv6 prefix is configurable", prefix: 128,
			give: [][]string{{"2001:db8::1"}, {"2001:db8::2"}, {"2001:db8::1"}}, want: []int{200, 200, 429}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixtureWith(t, func(c *Config) {
				trustAll(c)
				c.Login.IPAttempts, c.Login.LimitPeriod = 1, time.Hour
				if tt.prefix != 0 {
					c.Login.IPv6Prefix = tt.prefix
				}
			}, NoPurge{})
			for i, lines := range tt.give {
				resp, body := f.loginFrom(t, loginBody("otp@one.example", "", testKey), lines...)
				if resp.StatusCode != tt.want[i] {
					t.Fatalf("login %d (X-Forwarded-For %q): status %d, want %d: %s", i, lines, resp.StatusCode, tt.want[i], body)
				}
			}
		})
	}
}

func TestUnparsableRequestIsAProblemWithoutAPath(t *testing.T) {
	f := newFixture(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go f.app.Listener(ln) //nolint:errcheck // ends with Shutdown
	t.Cleanup(func() { f.app.Shutdown() })
	conn, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	// A control character in a header value: the parser refuses it.
	if _, err := io.WriteString(conn, "GET /realty/1 HTTP/1.1\r\nHost: x\r\nX-Bad: a\x01b\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var problem problemBody
	if err := json.NewDecoder(resp.Body).Decode(&problem); err != nil {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	if resp.StatusCode != 400 || problem.Instance != "" || problem.Detail == "" || resp.Header.Get(headerRequestID) == "" ||
		resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("status %d, body %+v, request id %q: want a 400 problem with a detail, no instance, and a request id",
			resp.StatusCode, problem, resp.Header.Get(headerRequestID))
	}
}
