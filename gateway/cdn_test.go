package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/internal/settings"
	"github.com/realty-gateway/gateway/upstream"
)

// staleListings answers every view as a stale copy stored an hour ago, as
// the cache does while the store fails.
type staleListings struct{ Listings }

func (staleListings) Cached(cache.Key, time.Time) (cache.Entry, bool) { return cache.Entry{}, false }

func (s staleListings) Get(ctx context.Context, k cache.Key) (cache.Entry, error) {
	e, err := s.Listings.Get(ctx, k)
	e.State = cache.Stale
	e.FreshUntil = time.Now().Add(-time.Hour + time.Minute).UnixMilli() // fresh for a minute, an hour ago
	return e, err
}

func TestStaleIsNeverSentAsFresh(t *testing.T) {
	tests := []struct {
		name         string
		cdn, stale   bool
		wantControl  string
		wantAgeAbove int // -1: no Age
	}{
		{name: "fresh, CDN mode", cdn: true, wantControl: "public, max-age=0, s-maxage=60, stale-while-revalidate=30, stale-if-error=3600", wantAgeAbove: -1},
		{name: "stale, CDN mode", cdn: true, stale: true, wantControl: "public, max-age=0, s-maxage=0, stale-if-error=3600", wantAgeAbove: 3500},
		{name: "stale, private", stale: true, wantControl: "private, no-cache", wantAgeAbove: 3500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := fixtureOptions{change: func(c *Config) {
				c.CacheTTL = time.Minute
				c.CDN = CDN{Enabled: tt.cdn, SMaxAge: time.Minute, StaleWhileRevalidate: 30 * time.Second, StaleIfError: time.Hour}
			}}
			if tt.stale {
				o.listings = func(l Listings) Listings { return staleListings{l} }
			}
			f := newFixtureOf(t, o)
			resp, body := f.get(t, "/realty/1", bearer(t, 1, 1))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if got := resp.Header.Get("Cache-Control"); got != tt.wantControl {
				t.Errorf("Cache-Control %q, want %q", got, tt.wantControl)
			}
			age, err := strconv.Atoi(resp.Header.Get("Age"))
			switch {
			case tt.wantAgeAbove < 0 && resp.Header.Get("Age") != "":
				t.Errorf("a fresh answer carries Age %q", resp.Header.Get("Age"))
			case tt.wantAgeAbove >= 0 && (err != nil || age <= tt.wantAgeAbove):
				t.Errorf("Age %q, want above %d", resp.Header.Get("Age"), tt.wantAgeAbove)
			}
		})
	}
}

func TestOriginSecret(t *testing.T) {
	const secret = "origin-secret-origin-secret-origin-secret"
	withSecret := func(c *Config) {
		c.CDN.Enabled, c.CDN.OriginSecret, c.CDN.OriginHeader = true, settings.Secret(secret), "X-Origin-Auth"
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
		c.CDN = CDN{Enabled: true, SMaxAge: time.Minute, OriginSecret: settings.Secret(secret), OriginHeader: "X-Origin-Auth"}
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
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Cache-Control") != "private, no-cache" || resp.Header.Get("Vary") != "Authorization" {
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
