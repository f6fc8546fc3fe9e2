package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/golang-jwt/jwt/v5"
	"github.com/valyala/fasthttp"

	"github.com/realty-gateway/gateway/breaker"
	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/internal/settings"
	"github.com/realty-gateway/gateway/ratelimit"
	"github.com/realty-gateway/gateway/revocation"
	"github.com/realty-gateway/gateway/signing"
	"github.com/realty-gateway/gateway/upstream"
	"github.com/realty-gateway/gateway/upstream/sqlite"
)

const (
	testIssuer   = "test-issuer"
	testAudience = "test-audience"
	testKey      = "test-api-key-of-firm-one"
	otherKey     = "test-api-key-of-firm-two"
	testPassword = "correct horse battery staple"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// fixture is a gateway on a real SQLite store: firm 1 with a password user
// (id 1) and a passwordless user (id 2), firm 2 with one user (id 3);
// listing 1 (1-1) is active, listing 2 (1-2) passive, both of firm 1.
type fixture struct {
	app *fiber.App
	srv *Server
	// revoked is the Set the token check consults.
	revoked *revocation.Set
}

func newFixture(t testing.TB) fixture {
	t.Helper()
	return newFixtureWith(t, nil, NoPurge{})
}

func newFixtureWithKeys(t testing.TB, keys []SigningKey) fixture {
	t.Helper()
	var spec []string
	for _, k := range keys {
		spec = append(spec, k.ID+":"+string(k.Secret))
	}
	return newFixtureWith(t, func(c *Config) { c.JWT.Keys = settings.Secret(strings.Join(spec, ",")) }, NoPurge{})
}

// newFixtureWith builds the fixture with a changed configuration and a
// purger of the test's choice.
func newFixtureWith(t testing.TB, change func(*Config), purger Purger) fixture {
	t.Helper()
	return newFixtureOf(t, fixtureOptions{change: change, purger: purger})
}

// fixtureOptions change what newFixtureOf builds; every field may be left
// zero.
type fixtureOptions struct {
	change func(*Config)
	purger Purger
	// log receives the gateway's JSON log.
	log io.Writer
	// accounts wraps the store's account lookups.
	accounts func(Accounts) Accounts
	// limiter replaces the in-process login limiter.
	limiter RateLimiter
	// listings wraps the listing cache.
	listings func(Listings) Listings
	// cache replaces the fixture's in-process cache with one on src.
	cache func(src cache.Source, log *slog.Logger) Listings
	// cacheTTL is the fresh time of the listings; 0: the fixture cache's.
	cacheTTL time.Duration
	// tokenAlg, when set, signs with a signing.Keyring of that algorithm
	// on the fixture's store (the HS256 key still verifies).
	tokenAlg string
}

func newFixtureOf(t testing.TB, o fixtureOptions) fixture {
	t.Helper()
	ctx := context.Background()
	store, err := sqlite.Open(ctx, t.TempDir()+"/gw.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	hash, err := HashPassword(testPassword)
	if err != nil {
		t.Fatal(err)
	}
	f1 := must(store.AddFirm(ctx, "one", KeyDigest(testKey)))(t)
	f2 := must(store.AddFirm(ctx, "two", KeyDigest(otherKey)))(t)
	u1 := must(store.AddUser(ctx, upstream.User{FirmID: f1.ID, Email: "pw@one.example", PasswordHash: hash}))(t)
	must(store.AddUser(ctx, upstream.User{FirmID: f1.ID, Email: "otp@one.example"}))(t)
	must(store.AddUser(ctx, upstream.User{FirmID: f2.ID, Email: "pw@two.example", PasswordHash: hash}))(t)
	if _, err := store.ImportListings(ctx, []upstream.Listing{
		{FirmID: f1.ID, FirmUserID: u1.ID, Title: "active", IsActive: true, CategoryID: new(int64(1)), Location: upstream.Location{CityID: new(int64(34))}},
		{FirmID: f1.ID, FirmUserID: u1.ID, Title: "passive", IsActive: false, CategoryID: new(int64(1)), Location: upstream.Location{CityID: new(int64(34))}},
	}); err != nil {
		t.Fatal(err)
	}
	logTo := o.log
	if logTo == nil {
		logTo = io.Discard
	}
	log := slog.New(slog.NewJSONHandler(logTo, nil))
	const fresh = time.Minute // the listing cache's
	// The bounds on a store call, a load, a request and a wait for a
	// hashing slot are generous: under -race on a busy machine an argon2id
	// check or a store call can take seconds, and no test here times them.
	guarded, err := upstream.NewGuarded(store,
		breaker.Config{Window: time.Minute, Bucket: time.Second, MinRequests: 20, FailureRatio: 0.5, OpenFor: time.Second, Probes: 1},
		breaker.Limits{CallTimeout: 10 * time.Second, MaxConcurrent: 4}, upstream.GuardedDeps{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	listings, err := cache.NewLocal(cache.Config{Fresh: fresh, LocalBytes: 1 << 20, LocalMaxAge: time.Second, InvalidationWait: time.Second},
		cache.Deps{Source: guarded, Log: log, LoadTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		JWT: JWT{
			Issuer: testIssuer, Audience: testAudience, Keys: settings.Secret("k1:" + string(testSecret)),
			TokenTTL: time.Hour, Leeway: 30 * time.Second,
		},
		RequestTimeout: 30 * time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, IdleTimeout: time.Second,
		BodyLimit: 1 << 20, HeaderLimit: 8192, AccessLog: "all",
		Login: Login{
			HashConcurrency: 2, HashWait: 10 * time.Second,
			AccountFailures: 1000, IPAttempts: 1000, KeyAttempts: 1000, UnknownKeyAttempts: 1000,
			IPv6Prefix: 64, LimitPeriod: time.Minute,
		},
	}
	if o.change != nil {
		o.change(&cfg)
	}
	var accounts Accounts = guarded
	if o.accounts != nil {
		accounts = o.accounts(accounts)
	}
	var limiter RateLimiter = o.limiter
	if limiter == nil {
		if limiter, err = ratelimit.New(nil, "", time.Second, log); err != nil {
			t.Fatal(err)
		}
	}
	var wrapped Listings = listings
	if o.cache != nil {
		wrapped = o.cache(guarded, log)
	}
	if o.listings != nil {
		wrapped = o.listings(wrapped)
	}
	revoked := revocation.NewSet()
	cacheTTL := o.cacheTTL
	if cacheTTL == 0 {
		cacheTTL = fresh
	}
	srv, err := New(cfg, Deps{Listings: wrapped, Accounts: accounts, Limiter: limiter, Purger: o.purger, Revoked: revoked, Log: log,
		RetryAfter: 5 * time.Second, CacheTTL: cacheTTL, Keys: fixtureKeys(t, cmp.Or(o.tokenAlg, asymmetric(cfg.JWT.Algorithm)), cfg.JWT, store, log)})
	if err != nil {
		t.Fatal(err)
	}
	return fixture{app: srv.App(), srv: srv, revoked: revoked}
}

// must fails the test when a fixture step fails.
func must[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func (f fixture) do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := f.app.Test(req, -1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func (f fixture) get(t *testing.T, path, auth string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	return f.do(t, req)
}

func (f fixture) send(t *testing.T, method, path, auth, body string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "application/json")
	return f.do(t, req)
}

func decode(t *testing.T, body string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return m
}

// sign makes a token with any claims and header, signed with secret.
func sign(t testing.TB, method jwt.SigningMethod, kid string, claims jwt.MapClaims, secret []byte) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func goodClaims(now time.Time) jwt.MapClaims {
	return jwt.MapClaims{
		"iss": testIssuer, "aud": []string{testAudience}, "sub": "1",
		"firmId": 1, "firmUserId": 1,
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix(), "jti": "x",
	}
}

func with(c jwt.MapClaims, key string, value any) jwt.MapClaims {
	out := jwt.MapClaims{}
	for k, v := range c {
		out[k] = v
	}
	if value == nil {
		delete(out, key)
	} else {
		out[key] = value
	}
	return out
}

// bearer returns an Authorization value for a user of a firm.
// asymmetric is alg where a Keyring signs with it, else "".
func asymmetric(alg string) string {
	if alg == signing.AlgHS256 {
		return ""
	}
	return alg
}

// fixtureKeys is a Keyring of alg on store, or nil for the configured
// HS256 keys alone.
func fixtureKeys(t testing.TB, alg string, cfg JWT, store signing.Store, log *slog.Logger) TokenKeys {
	t.Helper()
	if alg == "" {
		return nil
	}
	hmacs, err := cfg.SigningKeys()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := signing.New(signing.Config{Algorithm: alg, KeyDir: t.TempDir(), Poll: time.Hour},
		signing.Deps{Store: store, HMAC: hmacs, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := keys.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return keys
}

func bearer(t testing.TB, firmID, userID int64) string {
	t.Helper()
	c := with(with(with(goodClaims(time.Now()), "firmId", firmID), "firmUserId", userID), "sub", jsonNumber(userID))
	return "Bearer " + sign(t, jwt.SigningMethodHS256, "k1", c, testSecret)
}

func jsonNumber(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func (f fixture) login(t *testing.T, body string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/auth/login", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "test")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return f.do(t, req)
}

func loginBody(email, password, key string) string {
	return fmt.Sprintf(`{"email":%q,"password":%q,"key":%q}`, email, password, key)
}

// loginFrom logs in with the given X-Forwarded-For lines, as a client
// behind a proxy.
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

// token logs firm 1's password user in through the app.
func (f fixture) token(t *testing.T) string {
	t.Helper()
	resp, body := f.login(t, loginBody("pw@one.example", testPassword, testKey), nil)
	var out struct {
		JWTToken string `json:"jwtToken"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &out) != nil {
		t.Fatalf("login: %d %s", resp.StatusCode, body)
	}
	return out.JWTToken
}

func cdnMode(c *Config) {
	c.CDN = CDN{PublicActive: true, SMaxAge: time.Minute, StaleWhileRevalidate: 30 * time.Second, StaleIfError: time.Hour}
}

// requireProblem checks that a response is an RFC 9457 problem with the given
// status and returns its members.
func requireProblem(t *testing.T, resp *http.Response, body string, wantStatus int) map[string]any {
	t.Helper()
	if resp.StatusCode != wantStatus {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, wantStatus, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json", ct)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Fatalf("Cache-Control = %q, want no-store on an error", cc)
	}
	if etag := resp.Header.Get("ETag"); etag != "" {
		t.Fatalf("an error carries ETag %q", etag)
	}
	p := decode(t, body)
	if p["status"] != float64(wantStatus) {
		t.Fatalf("problem status %v, want %d: %s", p["status"], wantStatus, body)
	}
	return p
}

// problemWithoutInstance checks that a problem's instance is the path and returns
// the rest of it, re-encoded in a stable order.
func problemWithoutInstance(t *testing.T, p map[string]any, path string) string {
	t.Helper()
	if p["instance"] != path {
		t.Fatalf("instance %v, want %s", p["instance"], path)
	}
	delete(p, "instance")
	if id, _ := p["requestId"].(string); id == "" {
		t.Fatalf("problem without a requestId: %v", p)
	}
	delete(p, "requestId") // names the request, so it differs by design
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// stableHeaderLines lists a response's headers as "Name: values", leaving out
// those that differ between any two responses.
func stableHeaderLines(resp *http.Response) []string {
	var out []string
	for name, values := range resp.Header {
		if name == "Date" || name == "Content-Length" || name == http.CanonicalHeaderKey(headerRequestID) {
			continue
		}
		out = append(out, name+": "+strings.Join(values, ", "))
	}
	slices.Sort(out)
	return out
}

// servedHandler is what the server runs for each request of app: the
// entry stage (the Date, unknown methods), then Fiber's routes, built
// first as a listener builds them.
func servedHandler(app *fiber.App) fasthttp.RequestHandler {
	app.Handler() // builds the routes
	return app.Server().Handler
}
