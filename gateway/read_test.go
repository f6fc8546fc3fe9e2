package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/coding"
)

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

func TestCacheStatus(t *testing.T) {
	f := newFixture(t)
	auth := bearer(t, 1, 1)
	first, _ := f.get(t, "/realty/1", auth)
	second, _ := f.get(t, "/realty/1", auth)
	if got := first.Header.Get("Cache-Status"); got != "realty-gateway; fwd=miss" {
		t.Fatalf("first Cache-Status = %q", got)
	}
	if got := second.Header.Get("Cache-Status"); !strings.HasPrefix(got, "realty-gateway; hit; ttl=") {
		t.Fatalf("second Cache-Status = %q", got)
	}
}

// TestQueryDoesNotSplitTheCacheKey: the query string is not part of the
// cache key, so junk parameters can neither bypass the cache (a load on
// the store per request) nor fill it with copies.
func TestQueryDoesNotSplitTheCacheKey(t *testing.T) {
	f := newFixture(t)
	auth := bearer(t, 1, 1)
	tests := []struct {
		give      string
		wantCache string
	}{
		{give: "/realty/1?a=1", wantCache: "MISS"},
		{give: "/realty/1?b=2", wantCache: "HIT"},
		{give: "/realty/1", wantCache: "HIT"},
		{give: "/realty/1?", wantCache: "HIT"},
		{give: "/realty/1?ref=2&ref=1-2", wantCache: "HIT"},
	}
	var first string
	for _, tt := range tests {
		resp, body := f.get(t, tt.give, auth)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d: %s", tt.give, resp.StatusCode, body)
		}
		if got := resp.Header.Get("X-Cache"); got != tt.wantCache {
			t.Fatalf("%s: X-Cache %q, want %q", tt.give, got, tt.wantCache)
		}
		if first == "" {
			first = body
		} else if body != first {
			t.Fatalf("%s: body differs from the first response:\n%s\n%s", tt.give, body, first)
		}
	}
}

// TestCacheControlModes: listings are private by default; in CDN mode
// active ones are public and tagged for purges, and the CDN's lifetime and
// stale rules go in its own header (CDN-Cache-Control, or Fastly's
// Surrogate-Control), never in the Cache-Control that browsers read: a
// browser is never told it may show a stale listing. A stale copy, served
// while the store fails, is never sent as fresh: it carries its Age, and
// the CDN gets no freshness lifetime, only stale-if-error. Every listing
// response varies with Accept-Encoding.
func TestCacheControlModes(t *testing.T) {
	fastly := func(c *Config) { cdnMode(c); c.CDN.ControlHeader = SurrogateControl }
	tests := []struct {
		name     string
		give     func(*Config)
		stale    bool // the store fails: a copy stored an hour ago is served
		path     string
		wantCC   string
		wantCDN  [2]string // the CDN's header and its value; none where empty
		wantSKey string
		wantVary string
		wantAge  int // the Age must be above; 0: no Age
	}{
		{name: "default", path: "/realty/1", wantCC: "private, no-cache", wantVary: "Authorization, Accept-Encoding"},
		{name: "max-age", give: func(c *Config) { c.MaxAge = 30 * time.Second }, path: "/realty/1", wantCC: "private, max-age=30",
			wantVary: "Authorization, Accept-Encoding"},
		{name: "CDN, active", give: cdnMode, path: "/realty/1", wantCC: "public, max-age=0, must-revalidate",
			wantCDN:  [2]string{"CDN-Cache-Control", "max-age=60, stale-while-revalidate=30, stale-if-error=3600"},
			wantSKey: "realty-1 firm-1", wantVary: "Accept-Encoding"},
		{name: "CDN, active, browser max-age", give: func(c *Config) { cdnMode(c); c.MaxAge = 10 * time.Second }, path: "/realty/1",
			wantCC:   "public, max-age=10, must-revalidate",
			wantCDN:  [2]string{"CDN-Cache-Control", "max-age=60, stale-while-revalidate=30, stale-if-error=3600"},
			wantSKey: "realty-1 firm-1", wantVary: "Accept-Encoding"},
		{name: "CDN, Fastly", give: fastly, path: "/realty/1", wantCC: "public, max-age=0, must-revalidate",
			wantCDN:  [2]string{"Surrogate-Control", "max-age=60, stale-while-revalidate=30, stale-if-error=3600"},
			wantSKey: "realty-1 firm-1", wantVary: "Accept-Encoding"},
		{name: "CDN, passive", give: cdnMode, path: "/realty/2", wantCC: "private, no-cache", wantVary: "Authorization, Accept-Encoding"},
		{name: "stale, CDN mode", give: cdnMode, stale: true, path: "/realty/1", wantCC: "public, max-age=0, must-revalidate",
			wantCDN:  [2]string{"CDN-Cache-Control", "max-age=0, stale-if-error=3600"},
			wantSKey: "realty-1 firm-1", wantVary: "Accept-Encoding", wantAge: 3500},
		{name: "stale, Fastly", give: fastly, stale: true, path: "/realty/1", wantCC: "public, max-age=0, must-revalidate",
			wantCDN:  [2]string{"Surrogate-Control", "max-age=0, stale-if-error=3600"},
			wantSKey: "realty-1 firm-1", wantVary: "Accept-Encoding", wantAge: 3500},
		{name: "stale, private", stale: true, path: "/realty/1", wantCC: "private, no-cache",
			wantVary: "Authorization, Accept-Encoding", wantAge: 3500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := fixtureOptions{change: tt.give}
			if tt.stale {
				o.listings = func(l Listings) Listings { return staleListings{l} }
			}
			f := newFixtureOf(t, o)
			resp, body := f.get(t, tt.path, bearer(t, 1, 1))
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			cc := resp.Header.Get("Cache-Control")
			if cc != tt.wantCC {
				t.Fatalf("Cache-Control = %q, want %q", cc, tt.wantCC)
			}
			if strings.Contains(cc, "stale") || strings.Contains(cc, "s-maxage") {
				t.Fatalf("Cache-Control %q tells a browser it may serve stale or gives shared caches a lifetime", cc)
			}
			for _, h := range []string{"CDN-Cache-Control", "Surrogate-Control", "Cloudflare-CDN-Cache-Control"} {
				want := ""
				if h == tt.wantCDN[0] {
					want = tt.wantCDN[1]
				}
				if got := resp.Header.Get(h); got != want {
					t.Fatalf("%s = %q, want %q", h, got, want)
				}
			}
			if got := resp.Header.Get("Surrogate-Key"); got != tt.wantSKey {
				t.Fatalf("Surrogate-Key = %q, want %q", got, tt.wantSKey)
			}
			if tt.wantSKey != "" && resp.Header.Get("Cache-Tag") != strings.ReplaceAll(tt.wantSKey, " ", ",") {
				t.Fatalf("Cache-Tag = %q", resp.Header.Get("Cache-Tag"))
			}
			if got := resp.Header.Values("Vary"); len(got) != 1 || got[0] != tt.wantVary {
				t.Fatalf("Vary = %q, want %q", got, tt.wantVary)
			}
			age, err := strconv.Atoi(resp.Header.Get("Age"))
			switch {
			case tt.wantAge == 0 && resp.Header.Get("Age") != "":
				t.Errorf("a fresh answer carries Age %q", resp.Header.Get("Age"))
			case tt.wantAge > 0 && (err != nil || age <= tt.wantAge):
				t.Errorf("Age %q, want above %d", resp.Header.Get("Age"), tt.wantAge)
			}
		})
	}
}

// staleListings answers every view as a stale copy stored an hour ago, as
// the cache does while the store fails.
type staleListings struct{ Listings }

func (s staleListings) Get(ctx context.Context, k cache.Key, cod coding.Coding, at time.Time) (cache.Entry, error) {
	e, err := s.Listings.Get(ctx, k, cod, at)
	e.State = cache.Stale
	e.FreshUntil = time.Now().Add(-time.Hour + time.Minute).UnixMilli() // fresh for a minute, an hour ago
	return e, err
}

// TestCacheStatusNamesEachPath: RFC 9211's Cache-Status of each way a
// listing read is answered, a miss that another gateway's load answered
// (its lease on the cold key) with "collapsed".
func TestCacheStatusNamesEachPath(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	fresh := now.Add(90 * time.Second).UnixMilli()
	tests := []struct {
		name string
		give cache.Entry
		want string
	}{
		{"hit", cache.Entry{State: cache.Hit, FreshUntil: fresh}, "realty-gateway; hit; ttl=90"},
		{"stale", cache.Entry{State: cache.Stale, FreshUntil: now.Add(-time.Minute).UnixMilli()}, `realty-gateway; hit; ttl=-60; detail="stale-if-error"`},
		{"miss", cache.Entry{State: cache.Miss, FreshUntil: fresh}, "realty-gateway; fwd=miss"},
		{"miss answered by another gateway's load", cache.Entry{State: cache.Miss, FreshUntil: fresh, Collapsed: true}, "realty-gateway; fwd=miss; collapsed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(appendCacheStatus(nil, tt.give, now)); got != tt.want {
				t.Fatalf("Cache-Status %q; want %q", got, tt.want)
			}
		})
	}
}
