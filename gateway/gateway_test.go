package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/golang-jwt/jwt/v5"

	"github.com/realty-gateway/gateway/breaker"
	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/internal/settings"
	"github.com/realty-gateway/gateway/ratelimit"
	"github.com/realty-gateway/gateway/revocation"
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
	guarded, err := upstream.NewGuarded(store,
		breaker.Config{Window: time.Minute, Bucket: time.Second, MinRequests: 20, FailureRatio: 0.5, OpenFor: time.Second, Probes: 1},
		breaker.Limits{CallTimeout: time.Second, MaxConcurrent: 4}, upstream.GuardedDeps{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	listings, err := cache.NewLocal(cache.Config{Fresh: time.Minute, LocalBytes: 1 << 20, LocalMaxAge: time.Second, InvalidationWait: time.Second},
		cache.Deps{Source: guarded, Log: log, LoadTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		JWT: JWT{
			Issuer: testIssuer, Audience: testAudience, Keys: settings.Secret("k1:" + string(testSecret)),
			TokenTTL: time.Hour, Leeway: 30 * time.Second,
		},
		RequestTimeout: 2 * time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, IdleTimeout: time.Second,
		BodyLimit: 1 << 20, HeaderLimit: 8192, RetryAfter: 5 * time.Second, AccessLog: "all",
		Login: Login{
			HashConcurrency: 2, HashWait: time.Second,
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
	purger := o.purger
	if purger == nil {
		purger = NoPurge{}
	}
	var wrapped Listings = listings
	if o.listings != nil {
		wrapped = o.listings(wrapped)
	}
	revoked := revocation.NewSet()
	srv, err := New(cfg, wrapped, accounts, limiter, purger, revoked, log)
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

func TestTokenConformance(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	good := sign(t, jwt.SigningMethodHS256, "k1", goodClaims(now), testSecret)
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT","kid":"k1"}`))
	payload, _ := json.Marshal(goodClaims(now))
	unsigned := header + "." + base64.RawURLEncoding.EncodeToString(payload) + "."
	parts := strings.Split(good, ".")
	altered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(payload), `"firmId":1`, `"firmId":2`, 1))) + "." + parts[2]

	tests := []struct {
		name string
		give string // Authorization header
		want int
	}{
		{name: "valid", give: "Bearer " + good, want: 200},
		{name: "missing", give: "", want: 401},
		{name: "alg none", give: "Bearer " + unsigned, want: 401},
		{name: "HS512 with the right secret", give: "Bearer " + sign(t, jwt.SigningMethodHS512, "k1", goodClaims(now), testSecret), want: 401},
		{name: "another key", give: "Bearer " + sign(t, jwt.SigningMethodHS256, "k1", goodClaims(now), []byte("another-secret-another-secret-xx")), want: 401},
		{name: "altered payload", give: "Bearer " + altered, want: 401},
		{name: "unknown kid", give: "Bearer " + sign(t, jwt.SigningMethodHS256, "k2", goodClaims(now), testSecret), want: 401},
		{name: "malicious kid", give: "Bearer " + sign(t, jwt.SigningMethodHS256, "../../etc/passwd", goodClaims(now), testSecret), want: 401},
		{name: "no kid", give: "Bearer " + sign(t, jwt.SigningMethodHS256, "", goodClaims(now), testSecret), want: 401},
		{name: "no exp", give: "Bearer " + sign(t, jwt.SigningMethodHS256, "k1", with(goodClaims(now), "exp", nil), testSecret), want: 401},
		{name: "no iat", give: "Bearer " + sign(t, jwt.SigningMethodHS256, "k1", with(goodClaims(now), "iat", nil), testSecret), want: 401},
		{name: "iatMs as string", give: "Bearer " + sign(t, jwt.SigningMethodHS256, "k1", with(goodClaims(now), "iatMs", "1"), testSecret), want: 401},
		{name: "iatMs a fraction", give: "Bearer " + sign(t, jwt.SigningMethodHS256, "k1", with(goodClaims(now), "iatMs", 1.5), testSecret), want: 401},
		{name: "exp just past, beyond leeway", give: "Bearer " + sign(t, jwt.SigningMethodHS256, "k1", with(goodClaims(now), "exp", now.Add(-31*time.Second).Unix()), testSecret), want: 401},
		{name: "exp just past, within leeway", give: "Bearer " + sign(t, jwt.SigningMethodHS256, "k1", with(goodClaims(now), "exp", now.Add(-10*time.Second).Unix()), testSecret), want: 200},
		{name: "future nbf", give: "Bearer " + sign(t, jwt.SigningMethodHS256, "k1", with(goodClaims(now), "nbf", now.Add(time.Minute).Unix()), testSecret), want: 401},
		{name: "nbf within leeway", give: "Bearer " + sign(t, jwt.SigningMethodHS256, "k1", with(goodClaims(now), "nbf", now.Add(10*time.Second).Unix()), testSecret), want: 200},
		{name: "wrong iss", give: "Bearer " + sign(t, jwt.SigningMethodHS256, "k1", with(goodClaims(now), "iss", "evil"), testSecret), want: 401},
		{name: "wrong aud", give: "Bearer " + sign(t, jwt.SigningMethodHS256, "k1", with(goodClaims(now), "aud", "evil"), testSecret), want: 401},
		{name: "exp as string", give: "Bearer " + sign(t, jwt.SigningMethodHS256, "k1", with(goodClaims(now), "exp", "9999999999"), testSecret), want: 401},
		{name: "firmId as string", give: "Bearer " + sign(t, jwt.SigningMethodHS256, "k1", with(goodClaims(now), "firmId", "1"), testSecret), want: 401},
		{name: "Basic auth", give: "Basic dXNlcjpwYXNz", want: 401},
		{name: "Bearer with nothing", give: "Bearer ", want: 401},
		{name: "Bearer double space", give: "Bearer  " + good, want: 401},
		{name: "lower-case scheme with trailing space", give: "bearer " + good + " ", want: 401},
		{name: "dots", give: "Bearer " + strings.Repeat(".", 4000), want: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := f.get(t, "/realty/1", tt.give)
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
			if tt.want == 401 {
				if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
					t.Fatalf("WWW-Authenticate = %q", got)
				}
				if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
					t.Fatalf("Content-Type = %q", ct)
				}
			}
		})
	}
}

func TestParseRef(t *testing.T) {
	tests := []struct {
		give   string
		want   cache.Key
		wantOK bool
	}{
		{give: "1", want: cache.ByID(1), wantOK: true},
		{give: "9223372036854775807", want: cache.ByID(9223372036854775807), wantOK: true},
		{give: "12-34", want: cache.ByNumber(12, 34), wantOK: true},
		{give: "0"},
		{give: "007"},
		{give: "-5"},
		{give: "+5"},
		{give: "12-"},
		{give: "-12"},
		{give: "12-0"},
		{give: "0-12"},
		{give: "1-2-3"},
		{give: "9223372036854775808"},
		{give: "99999999999999999999"},
		{give: "5 "},
		{give: "5%00"},
		{give: "%EF%BC%95"},
		{give: "５"},
		{give: ""},
		{give: "1e3"},
		{give: "0x10"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			got, ok := ParseRef(tt.give)
			if ok != tt.wantOK || (ok && got != tt.want) {
				t.Fatalf("ParseRef(%q) = %+v, %v; want %+v, %v", tt.give, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestPathVariants(t *testing.T) {
	f := newFixture(t)
	auth := "Bearer " + sign(t, jwt.SigningMethodHS256, "k1", goodClaims(time.Now()), testSecret)
	tests := []struct {
		give string
		want int
	}{
		{give: "/realty/1", want: 200},
		{give: "/realty/1-1", want: 200},
		{give: "/realty/1?x=1", want: 200},
		{give: "/realty/12-", want: 400},
		{give: "/realty/-5", want: 400},
		{give: "/realty/+5", want: 400},
		{give: "/realty/007", want: 400},
		{give: "/realty/99999999999999999999", want: 400},
		{give: "/realty/5%00", want: 400},
		{give: "/realty/5%0d%0a", want: 400},
		{give: "/realty/%EF%BC%95", want: 400},
		{give: "/realty/5/", want: 404},
		{give: "/REALTY/5", want: 404},
		{give: "/realty/999", want: 404},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			resp, body := f.get(t, tt.give, auth)
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
			if tt.want >= 400 && resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("Content-Type = %q", resp.Header.Get("Content-Type"))
			}
		})
	}
}

func TestPassiveListingVisibleOnlyToItsFirm(t *testing.T) {
	f := newFixture(t)
	own := "Bearer " + sign(t, jwt.SigningMethodHS256, "k1", goodClaims(time.Now()), testSecret)
	other := "Bearer " + sign(t, jwt.SigningMethodHS256, "k1", with(with(with(goodClaims(time.Now()), "firmId", 2), "firmUserId", 3), "sub", "3"), testSecret)
	tests := []struct {
		name, path, auth string
		want             int
	}{
		{name: "own firm by id", path: "/realty/2", auth: own, want: 200},
		{name: "own firm by number", path: "/realty/1-2", auth: own, want: 200},
		{name: "other firm by id", path: "/realty/2", auth: other, want: 404},
		{name: "other firm by number", path: "/realty/1-2", auth: other, want: 404},
		{name: "other firm, active listing", path: "/realty/1", auth: other, want: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := f.get(t, tt.path, tt.auth)
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
		})
	}
}

func TestConditionalGet(t *testing.T) {
	f := newFixture(t)
	auth := "Bearer " + sign(t, jwt.SigningMethodHS256, "k1", goodClaims(time.Now()), testSecret)
	resp, _ := f.get(t, "/realty/1", auth)
	etag := resp.Header.Get("ETag")
	if !strings.HasPrefix(etag, `"`) {
		t.Fatalf("ETag %q is not a strong tag", etag)
	}
	req := httptest.NewRequest(http.MethodGet, "/realty/1-1", nil)
	req.Header.Set("Authorization", auth)
	req.Header.Set("If-None-Match", etag)
	resp, body := f.do(t, req)
	if resp.StatusCode != http.StatusNotModified || body != "" {
		t.Fatalf("status %d body %q, want 304 with no body", resp.StatusCode, body)
	}
}

func TestIssuedTokenCarriesTheClaims(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	tok, err := f.srv.issueToken(1, 1, now)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := jwt.Parse(tok, func(*jwt.Token) (any, error) { return testSecret, nil }, jwt.WithValidMethods([]string{"HS256"}))
	if err != nil {
		t.Fatal(err)
	}
	if parsed.Header["kid"] != "k1" {
		t.Fatalf("kid = %v", parsed.Header["kid"])
	}
	claims := parsed.Claims.(jwt.MapClaims)
	for _, name := range []string{"iss", "aud", "sub", "firmId", "firmUserId", "iat", "iatMs", "nbf", "exp", "jti"} {
		if _, ok := claims[name]; !ok {
			t.Errorf("claim %s missing", name)
		}
	}
	if exp, _ := claims.GetExpirationTime(); exp == nil || exp.Unix() != now.Add(time.Hour).Unix() {
		t.Errorf("exp = %v, want one hour from now", exp)
	}
}

func TestKeyRotation(t *testing.T) {
	oldSecret := []byte("old-secret-old-secret-old-secret")
	newSecret := []byte("new-secret-new-secret-new-secret")
	f := newFixtureWithKeys(t, []SigningKey{{ID: "new", Secret: newSecret}, {ID: "default", Secret: oldSecret}})
	now := time.Now()
	issued, err := f.srv.issueToken(1, 1, now)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		give string
		want int
	}{
		{name: "issued by the first key", give: issued, want: 200},
		{name: "old key still verifies", give: sign(t, jwt.SigningMethodHS256, "default", goodClaims(now), oldSecret), want: 200},
		{name: "old kid with the new secret", give: sign(t, jwt.SigningMethodHS256, "default", goodClaims(now), newSecret), want: 401},
		{name: "retired kid", give: sign(t, jwt.SigningMethodHS256, "k1", goodClaims(now), testSecret), want: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := f.get(t, "/realty/1", "Bearer "+tt.give)
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
		})
	}
	parsed, _, err := jwt.NewParser().ParseUnverified(issued, jwt.MapClaims{})
	if err != nil || parsed.Header["kid"] != "new" {
		t.Fatalf("issued kid = %v (err %v), want the first key's", parsed.Header["kid"], err)
	}
}

// TestRememberedTokenStillExpires: a token that passed once is remembered,
// but not past its exp.
func TestRememberedTokenStillExpires(t *testing.T) {
	f := newFixtureWith(t, func(c *Config) { c.JWT.Leeway = 0 }, NoPurge{})
	now := time.Now()
	exp := now.Truncate(time.Second).Add(2 * time.Second)
	tok := "Bearer " + sign(t, jwt.SigningMethodHS256, "k1", with(goodClaims(now), "exp", exp.Unix()), testSecret)
	if resp, body := f.get(t, "/realty/1", tok); resp.StatusCode != 200 {
		t.Fatalf("before exp: %d %s", resp.StatusCode, body)
	}
	if resp, _ := f.get(t, "/realty/1", tok); resp.StatusCode != 200 {
		t.Fatalf("remembered token before exp: %d", resp.StatusCode)
	}
	time.Sleep(time.Until(exp) + 50*time.Millisecond)
	if resp, _ := f.get(t, "/realty/1", tok); resp.StatusCode != 401 {
		t.Fatalf("remembered token after exp: %d, want 401", resp.StatusCode)
	}
}
