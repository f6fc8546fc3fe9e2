package gateway

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

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
		// noToken: no bearer token was presented, so the challenge
		// carries no error (RFC 6750 §3.1); every other refusal says
		// error="invalid_token".
		noToken bool
	}{
		{name: "valid", give: "Bearer " + good, want: 200},
		{name: "missing", give: "", want: 401, noToken: true},
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
		{name: "Basic auth", give: "Basic dXNlcjpwYXNz", want: 401, noToken: true},
		{name: "Bearer with nothing", give: "Bearer ", want: 401},
		// RFC 6750 §2.1: "Bearer" 1*SP b64token.
		{name: "Bearer double space", give: "Bearer  " + good, want: 200},
		{name: "Bearer three spaces", give: "Bearer   " + good, want: 200},
		{name: "Bearer and spaces alone", give: "Bearer   ", want: 401},
		// Trailing blanks are not part of a field value (RFC 9110 §5.5).
		{name: "lower-case scheme with trailing space", give: "bearer " + good + " ", want: 200},
		// RFC 9110 §11.1: the scheme is case-insensitive.
		{name: "lower-case scheme", give: "bearer " + good, want: 200},
		{name: "upper-case scheme", give: "BEARER " + good, want: 200},
		{name: "mixed-case scheme", give: "bEaReR " + good, want: 200},
		{name: "lower-case scheme, tab", give: "bearer\t" + good, want: 401, noToken: true},
		{name: "lower-case scheme, double space", give: "bearer  " + good, want: 200},
		{name: "dots", give: "Bearer " + strings.Repeat(".", 4000), want: 401},
		{name: "Bearer alone", give: "Bearer", want: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := f.get(t, "/realty/1", tt.give)
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
			if tt.want == 401 {
				challenge := `Bearer realm="realty", error="invalid_token"`
				if tt.noToken {
					challenge = `Bearer realm="realty"`
				}
				if got := resp.Header.Values("WWW-Authenticate"); len(got) != 1 || got[0] != challenge {
					t.Fatalf("WWW-Authenticate = %q, want %q", got, challenge)
				}
				if !strings.Contains(body, `"detail":"A valid bearer token is required."`) {
					t.Fatalf("body %s: the refusal must not say more than the missing token's", body)
				}
				if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
					t.Fatalf("Content-Type = %q", ct)
				}
			}
		})
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

// TestLoginTokenIssueTime: a login's token carries iat, in whole seconds,
// and iatMs within that second: the time the login arrived.
func TestLoginTokenIssueTime(t *testing.T) {
	f := newFixture(t)
	before := time.Now().UnixMilli()
	tok := f.token(t)
	after := time.Now().UnixMilli()
	parts := strings.Split(tok, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		IAT   json.Number `json:"iat"`
		IATMs int64       `json:"iatMs"`
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		t.Fatal(err)
	}
	iat, err := c.IAT.Int64()
	if err != nil {
		t.Fatalf("iat %q is not a whole number of seconds", c.IAT)
	}
	if c.IATMs < before || c.IATMs > after || c.IATMs/1000 != iat {
		t.Fatalf("iat %d, iatMs %d; want iatMs within [%d, %d] and within iat's second", iat, c.IATMs, before, after)
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
