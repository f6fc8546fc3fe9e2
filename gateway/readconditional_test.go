package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// withHeaders sends method on path with the token and the header lines
// given as name, value pairs.
func (f fixture) withHeaders(t *testing.T, method, path, auth, body string, lines ...string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", auth)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(lines); i += 2 {
		req.Header.Add(lines[i], lines[i+1])
	}
	return f.do(t, req)
}

// TestReadPreconditions: a GET (and HEAD) evaluates If-Match as writes do
// (RFC 9110 §13.1.1, §13.2.2): a false one is 412, whatever the cache
// holds; one that names the current tag (of any coding), or "*", lets the
// read go on; If-None-Match still gives 304, after If-Match.
func TestReadPreconditions(t *testing.T) {
	f := newFixture(t)
	auth := bearer(t, 1, 1)
	first, _ := f.get(t, "/realty/1", auth) // fills the cache: later reads are hits
	tag := first.Header.Get("ETag")
	gz, _ := f.withHeaders(t, "GET", "/realty/1", auth, "", "Accept-Encoding", "gzip")
	gzTag := gz.Header.Get("ETag")
	if tag == "" || gzTag == "" || gzTag == tag {
		t.Fatalf("tags %q and %q", tag, gzTag)
	}
	for _, tt := range []struct {
		name   string
		method string
		path   string
		lines  []string
		want   int
	}{
		{"If-Match another tag", "GET", "/realty/1", []string{"If-Match", `"zzz"`}, 412},
		{"If-Match another tag, HEAD", "HEAD", "/realty/1", []string{"If-Match", `"zzz"`}, 412},
		{"If-Match another tag, by number", "GET", "/realty/1-1", []string{"If-Match", `"zzz"`}, 412},
		{"If-Match the weak current tag", "GET", "/realty/1", []string{"If-Match", "W/" + tag}, 412},
		{"If-Match the current tag", "GET", "/realty/1", []string{"If-Match", tag}, 200},
		{"If-Match the current tag on a second line", "GET", "/realty/1", []string{"If-Match", `"zzz"`, "If-Match", tag}, 200},
		{"If-Match the gzip tag, identity read", "GET", "/realty/1", []string{"If-Match", gzTag}, 200},
		{"If-Match *", "GET", "/realty/1", []string{"If-Match", "*"}, 200},
		{"If-Match malformed", "GET", "/realty/1", []string{"If-Match", "zzz"}, 400},
		{"If-None-Match malformed", "GET", "/realty/1", []string{"If-None-Match", "zzz"}, 400},
		{"If-Match and If-None-Match the current tag", "GET", "/realty/1", []string{"If-Match", tag, "If-None-Match", tag}, 304},
		{"If-Match false before If-None-Match", "GET", "/realty/1", []string{"If-Match", `"zzz"`, "If-None-Match", tag}, 412},
		{"lower-case field name", "GET", "/realty/1", []string{"if-match", `"zzz"`}, 412},
		// §13.2.1: a 404 without the precondition stays a 404.
		{"If-Match on no listing", "GET", "/realty/99", []string{"If-Match", `"zzz"`}, 404},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := f.withHeaders(t, tt.method, tt.path, auth, "", tt.lines...)
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
			if tt.want == 412 && tt.method == "GET" {
				requireProblem(t, resp, body, 412)
			}
		})
	}
}

// TestCreatePreconditions: a POST creates a listing that has no current
// representation, so any If-Match is false (412, nothing created) and
// If-None-Match, "*" included, holds (RFC 9110 §13.1.1, §13.1.2).
func TestCreatePreconditions(t *testing.T) {
	f := newFixture(t)
	auth := bearer(t, 1, 1)
	for _, tt := range []struct {
		name  string
		lines []string
		want  int
	}{
		{"If-Match a tag", []string{"If-Match", `"stale"`}, 412},
		{"If-Match *", []string{"If-Match", "*"}, 412},
		{"If-Match malformed", []string{"If-Match", "stale"}, 400},
		{"If-Unmodified-Since ignored", []string{"If-Unmodified-Since", "Sat, 01 Jan 2000 00:00:00 GMT"}, 201},
		{"If-None-Match *", []string{"If-None-Match", "*"}, 201},
		{"If-None-Match a tag", []string{"If-None-Match", `"stale"`}, 201},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := f.withHeaders(t, "POST", "/realty", auth, newListing, tt.lines...)
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
			if tt.want != 201 {
				requireProblem(t, resp, body, tt.want)
			}
		})
	}
	// The fixture holds listings 1 and 2, and three creates succeeded: a
	// refused one would have taken an id.
	resp, body := f.send(t, "POST", "/realty", auth, newListing)
	if resp.StatusCode != 201 || resp.Header.Get("Location") != "/realty/6" {
		t.Fatalf("next create: %d at %q, want /realty/6: %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
}
