package e2e

// End-to-end tests of asymmetric tokens: two gateways on one store, their
// tokens checked by an outside verifier (go-jose, which the gateway does
// not use) from the JWKS fetched over HTTP, through a rotation run with
// the CLI as an operator runs it.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"
	"github.com/golang-jwt/jwt/v5"

	"github.com/realty-gateway/gateway/internal/testenv"
)

// asymmetricFleet is two gateways on a fresh PostgreSQL database and Redis
// prefix with no HS256 secret configured: the first generates an ES256 key
// into the data directory the two share (as a mounted secret would be),
// and both read the key set every 100 ms.
func asymmetricFleet(t *testing.T) fleet {
	t.Helper()
	e, prefix := postgresEnv(t, testenv.PostgresURL(t), testenv.RedisAddr(t))
	delete(e, "GATEWAY_JWT_SECRET")
	e["GATEWAY_JWT_KEYS_POLL"] = "100ms"
	e["GATEWAY_JWKS_MAX_AGE"] = "60s"
	e["GATEWAY_JWT_ISSUER"] = "https://listings.example/"
	f := fleet{w: newWorld(t, e), e: e, prefix: prefix}
	f.ps = []*process{start(t, e)}
	f.ps = append(f.ps, start(t, e))
	return f
}

// fetchJWKS reads the JWKS of p as a verifier would.
func fetchJWKS(t *testing.T, p *process) jose.JSONWebKeySet {
	t.Helper()
	r := p.request(t, http.MethodGet, "/.well-known/jwks.json", nil, "")
	var set jose.JSONWebKeySet
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/jwk-set+json" {
		t.Fatalf("GET jwks.json: %d %s %s", r.status, r.header.Get("Content-Type"), r.body)
	}
	if err := json.Unmarshal(r.body, &set); err != nil {
		t.Fatalf("go-jose cannot read the JWKS %s: %v", r.body, err)
	}
	for _, k := range set.Keys {
		if !k.IsPublic() || strings.Contains(string(r.body), `"d"`) {
			t.Fatalf("the JWKS holds a private key: %s", r.body)
		}
	}
	return set
}

// verifyOutside checks tok as an outside service would: go-jose, the keys
// of the JWKS, the algorithms published. It returns the kid and the claims.
func verifyOutside(set jose.JSONWebKeySet, tok string) (string, map[string]any, error) {
	parsed, err := josejwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.EdDSA, jose.ES256})
	if err != nil {
		return "", nil, err
	}
	kid := parsed.Headers[0].KeyID
	keys := set.Key(kid)
	if len(keys) != 1 {
		return kid, nil, jose.ErrJWKSKidNotFound
	}
	var claims map[string]any
	if err := parsed.Claims(keys[0].Key, &claims); err != nil {
		return kid, nil, err
	}
	return kid, claims, nil
}

func kidOf(t *testing.T, tok string) (kid, alg string) {
	t.Helper()
	head, _, _ := strings.Cut(tok, ".")
	b, err := base64.RawURLEncoding.DecodeString(head)
	var h struct{ Kid, Alg string }
	if err != nil || json.Unmarshal(b, &h) != nil {
		t.Fatalf("token header %q: %v", head, err)
	}
	return h.Kid, h.Alg
}

func TestEndToEndAsymmetricTokens(t *testing.T) {
	f := asymmetricFleet(t)
	login := f.w.passwordLogin()
	first := f.ps[0].token(t, login)
	oldKid, alg := kidOf(t, first)
	if alg != "ES256" {
		t.Fatalf("a new install signs with %s; want ES256", alg)
	}
	for i, p := range f.ps {
		set := fetchJWKS(t, p)
		kid, claims, err := verifyOutside(set, first)
		if err != nil || kid != oldKid || claims["iss"] != "https://listings.example/" {
			t.Fatalf("replica %d's JWKS: go-jose verified %q: %v, claims %v", i+1, kid, err, claims)
		}
	}
	f.readsEverywhere(t, "a token of the first replica", first)
	requireNoDiscoveryDocument(t, f.ps[1])

	// Step 1: publish an EdDSA key; it verifies and is listed, and does
	// not sign yet.
	added := admin(t, f.e, "", "signing-key", "add", "--alg", "EdDSA")
	newKid := added["kid"].(string)
	for i, p := range f.ps {
		eventually(t, "the new key in the JWKS", func() bool { set := fetchJWKS(t, p); return len(set.Key(newKid)) == 1 })
		if kid, _ := kidOf(t, p.token(t, login)); kid != oldKid {
			t.Fatalf("replica %d signs with %s before the new key was activated", i+1, kid)
		}
	}
	// Step 2: activate. Published a moment ago, it is refused unless --now.
	if code, out, errOut := gatewayCmdStderr(t, f.e, "", "signing-key", "activate", "--kid", newKid); code == 0 || !strings.Contains(errOut, "edges may cache the JWKS") {
		t.Fatalf("activate right after add: exit %d, %s %s; want a refusal naming the JWKS caching", code, out, errOut)
	}
	admin(t, f.e, "", "signing-key", "activate", "--kid", newKid, "--now")
	var second string
	for i, p := range f.ps {
		eventually(t, "the new key signing", func() bool { second = p.token(t, login); kid, _ := kidOf(t, second); return kid == newKid })
		if kid, _, err := verifyOutside(fetchJWKS(t, p), second); err != nil || kid != newKid {
			t.Fatalf("replica %d's EdDSA token: go-jose: %q %v", i+1, kid, err)
		}
	}
	// Step 3: retire the old key: its tokens verify until they expire.
	retired := admin(t, f.e, "", "signing-key", "retire", "--kid", oldKid)
	if until := time.UnixMilli(int64(retired["verifiesUntil"].(float64))); time.Until(until) < 50*time.Minute {
		t.Fatalf("retired until %v; want the token lifetime (1h) ahead", until)
	}
	f.readsEverywhere(t, "a retired key's token", first)
	f.readsEverywhere(t, "the new key's token", second)
	if _, _, err := verifyOutside(fetchJWKS(t, f.ps[0]), first); err != nil {
		t.Fatalf("go-jose, a retired key's token before its end: %v", err)
	}
	requireUnpublishedKeyFails(t, f, first, oldKid)
}

// requireUnpublishedKeyFails: a token with the same claims, signed by a
// key that was never published, fails with the outside verifier and at
// every gateway, whether it names a published kid or its own.
func requireUnpublishedKeyFails(t *testing.T, f fleet, model, publishedKid string) {
	t.Helper()
	unpublished, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	claims := jwt.MapClaims{}
	if _, _, err := jwt.NewParser().ParseUnverified(model, claims); err != nil {
		t.Fatal(err)
	}
	for _, kid := range []string{publishedKid, "unpublished"} {
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
		tok.Header["kid"] = kid
		forged, err := tok.SignedString(unpublished)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := verifyOutside(fetchJWKS(t, f.ps[0]), forged); err == nil {
			t.Errorf("go-jose verified a token of an unpublished key under kid %q", kid)
		}
		for i, p := range f.ps {
			if r := p.view(t, "/realty/1001", forged); r.status != http.StatusUnauthorized {
				t.Errorf("replica %d: a token of an unpublished key under kid %q: %d; want 401", i+1, kid, r.status)
			}
		}
	}
}

// requireNoDiscoveryDocument: even an https issuer serves no OpenID
// Connect Discovery document (its REQUIRED members would be untrue);
// verifiers take the JWKS's URL (docs/security.md, "Token keys").
func requireNoDiscoveryDocument(t *testing.T, p *process) {
	t.Helper()
	if r := p.request(t, http.MethodGet, "/.well-known/openid-configuration", nil, ""); r.status != http.StatusNotFound {
		t.Fatalf("openid-configuration: %d %s; want 404", r.status, r.body)
	}
}
