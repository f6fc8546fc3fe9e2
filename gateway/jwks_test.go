package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestJWKS(t *testing.T) {
	f := newFixtureOf(t, fixtureOptions{tokenAlg: "EdDSA", change: func(c *Config) { c.JWT.JWKSMaxAge = 300 * time.Second }})
	kid, _ := f.srv.tokenKeys.Current().Signer()
	get := func(header map[string]string) (*http.Response, string) {
		req := httptest.NewRequest(http.MethodGet, jwksPath, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		return f.do(t, req)
	}
	resp, body := get(nil)
	var set struct{ Keys []map[string]string }
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &set) != nil {
		t.Fatalf("GET %s: %d %s", jwksPath, resp.StatusCode, body)
	}
	want := map[string]string{"kty": "OKP", "crv": "Ed25519", "kid": kid, "alg": "EdDSA", "use": "sig"}
	if len(set.Keys) != 1 || len(set.Keys[0]["x"]) != 43 {
		t.Fatalf("JWKS %s; want one Ed25519 key with a 32-byte x", body)
	}
	for k, v := range want {
		if set.Keys[0][k] != v {
			t.Errorf("JWKS member %s = %q; want %q", k, set.Keys[0][k], v)
		}
	}
	if len(set.Keys[0]) != len(want)+1 || strings.Contains(body, `"k1"`) { // the HS256 key's kid, quoted: a random x may hold k1
		t.Errorf("JWKS %s has members beyond the public ones, or names the HS256 key", body)
	}
	etag := resp.Header.Get("ETag")
	for name, got := range map[string]string{
		"Content-Type": resp.Header.Get("Content-Type"), "Cache-Control": resp.Header.Get("Cache-Control"), "Vary": resp.Header.Get("Vary"),
	} {
		if want := map[string]string{"Content-Type": "application/jwk-set+json", "Cache-Control": "public, max-age=300", "Vary": "Accept-Encoding"}[name]; got != want {
			t.Errorf("%s = %q; want %q", name, got, want)
		}
	}
	if resp, _ := get(map[string]string{"If-None-Match": etag}); resp.StatusCode != http.StatusNotModified || resp.Header.Get("ETag") != etag {
		t.Errorf("If-None-Match: %s: %d, ETag %q; want 304 with the same ETag", etag, resp.StatusCode, resp.Header.Get("ETag"))
	}
	// A one-key set is smaller than its gzip: it is sent as it is, unless
	// the client refuses identity.
	if gz, gzBody := get(map[string]string{"Accept-Encoding": "gzip"}); gz.Header.Get("Content-Encoding") != "" || gz.Header.Get("ETag") != etag || gzBody != body {
		t.Errorf("gzip: Content-Encoding %q, ETag %q; want the identity body, which gzip would enlarge", gz.Header.Get("Content-Encoding"), gz.Header.Get("ETag"))
	}
	gz, _ := get(map[string]string{"Accept-Encoding": "gzip, identity;q=0"})
	if gz.Header.Get("Content-Encoding") != "gzip" || gz.Header.Get("ETag") == etag || gz.Header.Get("ETag") == "" {
		t.Errorf("gzip, identity refused: Content-Encoding %q, ETag %q; want gzip and a tag of its own", gz.Header.Get("Content-Encoding"), gz.Header.Get("ETag"))
	}
	req := httptest.NewRequest(http.MethodHead, jwksPath, nil)
	if resp, body := f.do(t, req); resp.StatusCode != 200 || body != "" || resp.Header.Get("ETag") != etag {
		t.Errorf("HEAD: %d %q ETag %q; want 200, no body, the GET's ETag", resp.StatusCode, body, resp.Header.Get("ETag"))
	}
	// No discovery document: its REQUIRED members would be untrue.
	if resp, _ := f.get(t, "/.well-known/openid-configuration", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("openid-configuration of issuer %q: %d; want 404", testIssuer, resp.StatusCode)
	}
}

// TestEdDSATokens: the gateway signs EdDSA with its key set, accepts its
// tokens, keeps accepting the configured HS256 key, and accepts the auth
// scheme in any case.
func TestEdDSATokens(t *testing.T) {
	f := newFixtureOf(t, fixtureOptions{tokenAlg: "EdDSA"})
	tok := f.token(t)
	kid, _ := f.srv.tokenKeys.Current().Signer()
	if !strings.HasPrefix(tok, "ey") || kid == "k1" {
		t.Fatalf("token %q by %s", tok, kid)
	}
	for _, auth := range []string{"Bearer " + tok, bearer(t, 1, 1)} {
		if resp, body := f.get(t, "/realty/1", auth); resp.StatusCode != 200 {
			t.Fatalf("GET with %.20s…: %d %s", auth, resp.StatusCode, body)
		}
	}
}
