package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/internal/settings"
	"github.com/realty-gateway/gateway/upstream"
)

func TestOriginSecret(t *testing.T) {
	const secret = "origin-secret-origin-secret-origin-secret"
	withSecret := func(c *Config) {
		c.CDN.PublicActive, c.CDN.OriginSecret, c.CDN.OriginHeader = true, settings.Secret(secret), "X-Origin-Auth"
	}
	tests := []struct {
		name   string
		change func(*Config)
		method string
		path   string
		header map[string]string
		want   int
	}{
		{name: "active listing with the secret", change: withSecret, path: "/realty/1", header: map[string]string{"X-Origin-Auth": secret}, want: 200},
		{name: "both forms", change: withSecret, path: "/realty/1-1", header: map[string]string{"X-Origin-Auth": secret}, want: 200},
		{name: "passive listing with the secret", change: withSecret, path: "/realty/2", header: map[string]string{"X-Origin-Auth": secret}, want: 404},
		{name: "wrong secret", change: withSecret, path: "/realty/1", header: map[string]string{"X-Origin-Auth": secret + "x"}, want: 401},
		{name: "no secret, no token", change: withSecret, path: "/realty/1", want: 401},
		{name: "a write with the secret", change: withSecret, method: http.MethodDelete, path: "/realty/1", header: map[string]string{"X-Origin-Auth": secret}, want: 401},
		{name: "not configured: the header is ignored", path: "/realty/1", header: map[string]string{"X-Origin-Auth": secret}, want: 401},
		{name: "token still works", change: withSecret, path: "/realty/2", header: map[string]string{"Authorization": "<owner>"}, want: 200},
		{name: "a token wins over the secret", change: withSecret, path: "/realty/2",
			header: map[string]string{"Authorization": "<owner>", "X-Origin-Auth": secret}, want: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixtureWith(t, tt.change, NoPurge{})
			method := tt.method
			if method == "" {
				method = http.MethodGet
			}
			req := httptest.NewRequest(method, tt.path, nil)
			for k, v := range tt.header {
				if v == "<owner>" {
					v = bearer(t, 1, 1)
				}
				req.Header.Set(k, v)
			}
			if resp, body := f.do(t, req); resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
		})
	}
}

// TestCDNModeRevokedTokenReadsNoPassiveListing: in CDN mode a passive
// listing is never public (private, varying by Authorization), so a shared
// cache never holds one and every read of it reaches the gateway, which
// refuses a revoked token, also when the CDN sends its origin secret
// beside it; the secret alone reads active listings only.
func TestCDNModeRevokedTokenReadsNoPassiveListing(t *testing.T) {
	const secret = "origin-secret-origin-secret-origin-secret"
	f := newFixtureWith(t, func(c *Config) {
		c.CDN = CDN{PublicActive: true, SMaxAge: time.Minute, OriginSecret: settings.Secret(secret), OriginHeader: "X-Origin-Auth"}
	}, NoPurge{})
	owner := bearer(t, 1, 1)
	get := func(path string, header map[string]string) (*http.Response, string) {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		return f.do(t, req)
	}
	viaCDN := map[string]string{"Authorization": owner, "X-Origin-Auth": secret}

	resp, body := get("/realty/2", viaCDN)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Cache-Control") != "private, no-cache" || resp.Header.Get("Vary") != "Authorization, Accept-Encoding" {
		t.Fatalf("the owner's passive listing: %d, Cache-Control %q, Vary %q; want 200, private, varying by Authorization: %s",
			resp.StatusCode, resp.Header.Get("Cache-Control"), resp.Header.Get("Vary"), body)
	}
	if resp, _ := get("/realty/1", viaCDN); !strings.HasPrefix(resp.Header.Get("Cache-Control"), "public") {
		t.Fatalf("an active listing in CDN mode: Cache-Control %q; want public", resp.Header.Get("Cache-Control"))
	}

	f.revoked.Add(upstream.Revocation{FirmID: 1, UserID: 1, At: time.Now()})
	for _, path := range []string{"/realty/2", "/realty/1-2"} {
		resp, body := get(path, viaCDN)
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("%s with the revoked token and the origin secret: %d, Cache-Control %q; want 401, no-store: %s",
				path, resp.StatusCode, resp.Header.Get("Cache-Control"), body)
		}
	}
	if resp, _ := get("/realty/2", map[string]string{"X-Origin-Auth": secret}); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the passive listing with the origin secret alone: %d; want 404", resp.StatusCode)
	}
}

type recordingPurger struct {
	mu   sync.Mutex
	keys []string // "hard realty-1" or "soft realty-1"
}

func (p *recordingPurger) PurgeThen(_ context.Context, hard bool, done func(bool), keys ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	kind := "soft"
	if hard {
		kind = "hard"
	}
	for _, k := range keys {
		p.keys = append(p.keys, kind+" "+k)
	}
	done(true)
}

// TestWritesPurgeTheCDN: every write purges its listing's key; a write
// that hides a listing (active to passive, delete) purges hard.
func TestWritesPurgeTheCDN(t *testing.T) {
	p := &recordingPurger{}
	f := newFixtureWith(t, cdnMode, p)
	auth := bearer(t, 1, 1)
	_, body := f.get(t, "/realty/1", auth)
	if resp, b := f.send(t, http.MethodPut, "/realty/1", auth, body); resp.StatusCode != 200 {
		t.Fatalf("PUT: %d %s", resp.StatusCode, b)
	}
	passive := strings.Replace(body, `"isActive":true`, `"isActive":false`, 1)
	if resp, b := f.send(t, http.MethodPut, "/realty/1", auth, passive); resp.StatusCode != 200 {
		t.Fatalf("PUT passive: %d %s", resp.StatusCode, b)
	}
	if resp, _ := f.send(t, http.MethodDelete, "/realty/2", auth, ""); resp.StatusCode != 204 {
		t.Fatalf("DELETE: %d", resp.StatusCode)
	}
	want := []string{"soft realty-1", "hard realty-1", "hard realty-2"}
	if !slices.Equal(p.keys, want) {
		t.Fatalf("purged %q, want %q", p.keys, want)
	}
}

// TestRefusedConditionalWriteTouchesNothing: a write whose precondition is
// false is a 412 problem and sends no purge; the cached copy still
// answers, a hit, with its tag. (The store's own check, the one that
// decides a race, is TestStore/ConcurrentConditionalUpdates and
// TestEndToEndConditionalRace.)
func TestRefusedConditionalWriteTouchesNothing(t *testing.T) {
	p := &recordingPurger{}
	f := newFixtureWith(t, cdnMode, p)
	auth := bearer(t, 1, 1)
	read, body := f.get(t, "/realty/1", auth)
	tag := read.Header.Get("ETag")
	for _, h := range []map[string]string{
		{"If-Match": `"AAAAAAAAAAAAAAAAAAAAAA"`},
		{"If-None-Match": "*"},
		{"If-None-Match": tag},
		{"If-Unmodified-Since": "Sat, 01 Jan 2000 00:00:00 GMT"},
	} {
		for _, method := range []string{http.MethodPut, http.MethodDelete} {
			req := httptest.NewRequest(method, "/realty/1", strings.NewReader(body))
			req.Header.Set("Authorization", auth)
			req.Header.Set("Content-Type", "application/json")
			for k, v := range h {
				req.Header.Set(k, v)
			}
			if resp, b := f.do(t, req); resp.StatusCode != http.StatusPreconditionFailed ||
				resp.Header.Get("Content-Type") != "application/problem+json" || resp.Header.Get("ETag") != "" {
				t.Fatalf("%s with %v: %d %s, ETag %q; want a 412 problem", method, h, resp.StatusCode, b, resp.Header.Get("ETag"))
			}
		}
	}
	if len(p.keys) != 0 {
		t.Fatalf("refused writes purged %q", p.keys)
	}
	again, _ := f.get(t, "/realty/1", auth)
	if again.StatusCode != 200 || again.Header.Get("X-Cache") != "HIT" || again.Header.Get("ETag") != tag {
		t.Fatalf("after refused writes: %d, X-Cache %q, ETag %q; want the cached copy, %s", again.StatusCode,
			again.Header.Get("X-Cache"), again.Header.Get("ETag"), tag)
	}
}
