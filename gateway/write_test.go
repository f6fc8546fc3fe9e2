package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// bearer returns an Authorization value for a user of a firm.
func bearer(t testing.TB, firmID, userID int64) string {
	t.Helper()
	c := with(with(with(goodClaims(time.Now()), "firmId", firmID), "firmUserId", userID), "sub", jsonNumber(userID))
	return "Bearer " + sign(t, jwt.SigningMethodHS256, "k1", c, testSecret)
}

func jsonNumber(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
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

const newListing = `{"title":"New flat","categoryId":3,"location":{"cityId":6,"latitude":39.9},"firmId":99,"firmUserId":99,"id":99}`

func TestCreate(t *testing.T) {
	f := newFixture(t)
	auth := bearer(t, 1, 2) // the passwordless user of firm 1
	resp, body := f.send(t, http.MethodPost, "/realty", auth, newListing)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	got := decode(t, body)
	if got["firmId"] != 1.0 || got["firmUserId"] != 2.0 || got["id"] == 99.0 || got["no"] != 3.0 || got["listingId"] != "1-3" {
		t.Fatalf("created %v: firm and user must come from the token, id and no from the server", got)
	}
	if loc := resp.Header.Get("Location"); loc != "/realty/"+jsonNumber(int64(got["id"].(float64))) {
		t.Fatalf("Location = %q", loc)
	}
	if got["createdDate"].(float64) <= 0 || got["updatedDate"] != got["createdDate"] {
		t.Fatalf("dates %v %v", got["createdDate"], got["updatedDate"])
	}
	view, viewBody := f.get(t, resp.Header.Get("Location"), auth)
	if view.StatusCode != 200 || viewBody != body || view.Header.Get("X-Cache") != "HIT" {
		t.Fatalf("read after create: %d %s %s", view.StatusCode, view.Header.Get("X-Cache"), viewBody)
	}

	resp, body = f.send(t, http.MethodPost, "/realty", auth, `{"title":"Taken","no":3,"categoryId":1,"location":{"cityId":1}}`)
	if resp.StatusCode != http.StatusConflict || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("taken no: %d %s", resp.StatusCode, body)
	}
	resp, body = f.send(t, http.MethodPost, "/realty", auth, `{"title":"Free","no":40,"categoryId":1,"location":{"cityId":1}}`)
	if resp.StatusCode != http.StatusCreated || decode(t, body)["no"] != 40.0 {
		t.Fatalf("free no: %d %s", resp.StatusCode, body)
	}
}

func TestWriteValidation(t *testing.T) {
	f := newFixture(t)
	auth := bearer(t, 1, 1)
	tests := []struct {
		name       string
		method     string
		path       string
		give       string
		wantStatus int
		wantFields []string
	}{
		{name: "missing required", method: "POST", path: "/realty", give: `{}`, wantStatus: 422, wantFields: []string{"categoryId", "location.cityId", "title"}},
		{name: "wrong types", method: "POST", path: "/realty", give: `{"title":1,"categoryId":"x","location":{"cityId":true}}`, wantStatus: 422, wantFields: []string{"categoryId", "location.cityId", "title"}},
		{name: "ranges", method: "POST", path: "/realty", give: `{"title":"x","categoryId":1,"location":{"cityId":1,"latitude":91,"longitude":181}}`, wantStatus: 422, wantFields: []string{"location.latitude", "location.longitude"}},
		{name: "enums", method: "POST", path: "/realty", give: `{"title":"x","categoryId":1,"location":{"cityId":1},"realtyFiles":[{"imageType":"PDF"}]}`, wantStatus: 422, wantFields: []string{"realtyFiles[0].imageType"}},
		{name: "sizes", method: "POST", path: "/realty", give: `{"title":"` + strings.Repeat("t", 201) + `","categoryId":1,"location":{"cityId":1}}`, wantStatus: 422, wantFields: []string{"title"}},
		{name: "unknown member", method: "POST", path: "/realty", give: `{"title":"x","categoryId":1,"location":{"cityId":1},"price":5}`, wantStatus: 422, wantFields: []string{"price"}},
		{name: "not JSON", method: "POST", path: "/realty", give: `{"title":`, wantStatus: 400},
		{name: "not an object", method: "POST", path: "/realty", give: `[1]`, wantStatus: 422, wantFields: []string{""}},
		{name: "unbounded currency", method: "POST", path: "/realty", give: `{"title":"x","categoryId":1,"location":{"cityId":1},"attributes":{"priceCurrencyType":"` + strings.Repeat("T", 1001) + `"}}`, wantStatus: 422, wantFields: []string{"attributes.priceCurrencyType"}},
		{name: "PUT cannot change no", method: "PUT", path: "/realty/1", give: `{"title":"x","no":5,"categoryId":1,"location":{"cityId":1}}`, wantStatus: 422, wantFields: []string{"no"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := f.send(t, tt.method, tt.path, auth, tt.give)
			if resp.StatusCode != tt.wantStatus || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.wantStatus, body)
			}
			var problem struct {
				Errors []struct{ Field string } `json:"errors"`
			}
			_ = json.Unmarshal([]byte(body), &problem)
			var got []string
			for _, e := range problem.Errors {
				got = append(got, e.Field)
			}
			if !slices.Equal(got, tt.wantFields) {
				t.Fatalf("fields %q, want %q", got, tt.wantFields)
			}
		})
	}
	req := httptest.NewRequest(http.MethodPost, "/realty", strings.NewReader(newListing))
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "text/plain")
	if resp, _ := f.do(t, req); resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("text/plain body: %d, want 415", resp.StatusCode)
	}
}

func TestReplaceAndDelete(t *testing.T) {
	f := newFixture(t)
	owner := bearer(t, 1, 2)
	other := bearer(t, 2, 3)

	// A GET-then-PUT round trip works, and keeps no and firmUserId.
	_, original := f.get(t, "/realty/1-1", owner)
	edited := strings.Replace(original, `"title":"active"`, `"title":"edited"`, 1)
	resp, body := f.send(t, http.MethodPut, "/realty/1-1", owner, edited)
	if resp.StatusCode != 200 {
		t.Fatalf("PUT: %d %s", resp.StatusCode, body)
	}
	got, was := decode(t, body), decode(t, original)
	if got["title"] != "edited" || got["no"] != was["no"] || got["firmUserId"] != was["firmUserId"] || got["createdDate"] != was["createdDate"] {
		t.Fatalf("PUT result %v", got)
	}
	if got["updatedDate"].(float64) <= was["updatedDate"].(float64) {
		t.Fatalf("updatedDate %v not after %v", got["updatedDate"], was["updatedDate"])
	}
	for _, path := range []string{"/realty/1", "/realty/1-1"} {
		if _, b := f.get(t, path, owner); !strings.Contains(b, `"title":"edited"`) {
			t.Fatalf("%s after PUT: %s", path, b)
		}
	}

	// Other firms get 404 for writes, by both forms, and change nothing.
	for _, tt := range []struct{ method, path string }{
		{"PUT", "/realty/1"}, {"PUT", "/realty/1-1"}, {"DELETE", "/realty/1"}, {"DELETE", "/realty/1-1"},
	} {
		if resp, body := f.send(t, tt.method, tt.path, other, edited); resp.StatusCode != 404 {
			t.Fatalf("%s %s by another firm: %d %s", tt.method, tt.path, resp.StatusCode, body)
		}
	}
	if resp, _ := f.get(t, "/realty/1", owner); resp.StatusCode != 200 {
		t.Fatal("another firm's DELETE removed the listing")
	}

	if resp, body := f.send(t, http.MethodDelete, "/realty/1", owner, ""); resp.StatusCode != 204 || body != "" {
		t.Fatalf("DELETE: %d %q", resp.StatusCode, body)
	}
	for _, path := range []string{"/realty/1", "/realty/1-1"} {
		if resp, _ := f.get(t, path, owner); resp.StatusCode != 404 {
			t.Fatalf("%s after DELETE: %d", path, resp.StatusCode)
		}
	}
	if resp, _ := f.send(t, http.MethodDelete, "/realty/1", owner, ""); resp.StatusCode != 404 {
		t.Fatalf("second DELETE: %d", resp.StatusCode)
	}
}

func TestMethodNotAllowed(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		method, path string
		wantAllow    []string
	}{
		{method: "PATCH", path: "/realty/1", wantAllow: []string{"GET", "PUT", "DELETE"}},
		{method: "POST", path: "/realty/1", wantAllow: []string{"GET", "PUT", "DELETE"}},
		{method: "GET", path: "/realty", wantAllow: []string{"POST"}},
		{method: "GET", path: "/auth/login", wantAllow: []string{"POST"}},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			resp, body := f.send(t, tt.method, tt.path, bearer(t, 1, 1), "")
			if resp.StatusCode != http.StatusMethodNotAllowed {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			allow := resp.Header.Get("Allow")
			for _, m := range tt.wantAllow {
				if !strings.Contains(allow, m) {
					t.Fatalf("Allow = %q, want %s in it", allow, m)
				}
			}
		})
	}
}

func TestCacheControlModes(t *testing.T) {
	tests := []struct {
		name        string
		give        func(*Config)
		path        string
		wantCC      string
		wantSKey    string
		wantVaryAut bool
	}{
		{name: "default", path: "/realty/1", wantCC: "private, no-cache", wantVaryAut: true},
		{name: "max-age", give: func(c *Config) { c.MaxAge = 30 * time.Second }, path: "/realty/1", wantCC: "private, max-age=30", wantVaryAut: true},
		{name: "CDN, active", give: cdnMode, path: "/realty/1",
			wantCC: "public, max-age=0, s-maxage=60, stale-while-revalidate=30, stale-if-error=3600", wantSKey: "realty-1 firm-1"},
		{name: "CDN, passive", give: cdnMode, path: "/realty/2", wantCC: "private, no-cache", wantVaryAut: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixtureWith(t, tt.give, NoPurge{})
			resp, body := f.get(t, tt.path, bearer(t, 1, 1))
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if got := resp.Header.Get("Cache-Control"); got != tt.wantCC {
				t.Fatalf("Cache-Control = %q, want %q", got, tt.wantCC)
			}
			if got := resp.Header.Get("Surrogate-Key"); got != tt.wantSKey {
				t.Fatalf("Surrogate-Key = %q, want %q", got, tt.wantSKey)
			}
			if tt.wantSKey != "" && resp.Header.Get("Cache-Tag") != strings.ReplaceAll(tt.wantSKey, " ", ",") {
				t.Fatalf("Cache-Tag = %q", resp.Header.Get("Cache-Tag"))
			}
			if got := resp.Header.Get("Vary") == "Authorization"; got != tt.wantVaryAut {
				t.Fatalf("Vary = %q", resp.Header.Get("Vary"))
			}
		})
	}
}

func cdnMode(c *Config) {
	c.CDN = CDN{Enabled: true, SMaxAge: time.Minute, StaleWhileRevalidate: 30 * time.Second, StaleIfError: time.Hour}
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
