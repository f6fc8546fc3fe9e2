package gateway

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// advProblem checks that a response is an RFC 9457 problem with the given
// status and returns its members.
func advProblem(t *testing.T, resp *http.Response, body string, wantStatus int) map[string]any {
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

// TestAdversarialPaths sends hostile listing paths with a valid token.
// Every one must end in a 4xx problem+json: never a 200 for a path that
// is not the canonical form, never a 5xx.
func TestAdversarialPaths(t *testing.T) {
	f := newFixture(t)
	auth := bearer(t, 1, 1)
	tests := []struct {
		name string
		give string // the request target, as sent on the wire
		want int
		// why documents the expectation: who refuses the path and how.
		why string
	}{
		// Malformed: the route matches, parseRef refuses the reference.
		{name: "number without no", give: "/realty/12-", want: 400, why: "parseRef: empty no"},
		{name: "negative", give: "/realty/-5", want: 400, why: "parseRef: a leading '-' is an empty firm"},
		{name: "plus sign", give: "/realty/+5", want: 400, why: "parseRef: no sign allowed"},
		{name: "leading zeros", give: "/realty/007", want: 400, why: "parseRef: only canonical decimals, else 007 and 7 would be two cache keys"},
		{name: "beyond int64", give: "/realty/99999999999999999999", want: 400, why: "parseRef: ParseInt overflows"},
		{name: "int64 max plus one", give: "/realty/9223372036854775808", want: 400, why: "parseRef: ParseInt overflows"},
		{name: "zero", give: "/realty/0", want: 400, why: "parseRef: ids start at 1"},
		{name: "three parts", give: "/realty/1-2-3", want: 400, why: "parseRef: no after the first '-' is not a number"},

		// Encoded and foreign: Fiber does not unescape route parameters
		// (UnescapePath is off), so parseRef sees the escapes themselves
		// and refuses them; no decoded NUL, CR or LF reaches the handler.
		{name: "NUL", give: "/realty/%00", want: 400, why: "parseRef sees \"%00\""},
		{name: "id then NUL", give: "/realty/5%00", want: 400, why: "parseRef sees \"5%00\""},
		{name: "CRLF", give: "/realty/%0d%0a", want: 400, why: "parseRef sees \"%0d%0a\""},
		{name: "id then CRLF", give: "/realty/5%0d%0a", want: 400, why: "parseRef sees \"5%0d%0a\""},
		{name: "full-width five", give: "/realty/%EF%BC%95", want: 400, why: "parseRef sees the escapes; decoded it would be U+FF15, not an ASCII digit either"},
		{name: "escaped ASCII digit", give: "/realty/%31", want: 400, why: "%31 is \"1\" by RFC 3986, but Fiber leaves it escaped: strict, refused rather than normalized"},
		{name: "escaped slash in ref", give: "/realty/1%2f", want: 400, why: "parseRef sees \"1%2f\""},
		{name: "escaped slash before ref", give: "/realty%2f1", want: 404, why: "the router matches the raw path; /realty%2f1 is no route"},

		// Variants: routing is strict and case-sensitive, and Fiber does
		// not clean the path, so none of these reaches the listing.
		{name: "double leading slash", give: "//realty/5", want: 404, why: "Fiber routes the raw path; // is not cleaned to /"},
		{name: "double leading slash, existing listing", give: "//realty/1", want: 404, why: "as above, even where /realty/1 is a 200"},
		{name: "trailing slash", give: "/realty/5/", want: 404, why: "StrictRouting"},
		{name: "trailing slash, existing listing", give: "/realty/1/", want: 404, why: "StrictRouting"},
		{name: "upper case", give: "/REALTY/5", want: 404, why: "CaseSensitive"},
		{name: "upper case, existing listing", give: "/REALTY/1", want: 404, why: "CaseSensitive"},
		{name: "dot segment", give: "/realty/./1", want: 404, why: "dot segments are not removed"},
		{name: "dot-dot segment", give: "/realty/1/..", want: 404, why: "dot segments are not removed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := f.get(t, tt.give, auth)
			if resp.StatusCode == http.StatusOK || resp.StatusCode >= 500 {
				t.Fatalf("%s answered %d (%s): must be a 4xx: %s", tt.give, resp.StatusCode, tt.why, body)
			}
			p := advProblem(t, resp, body, tt.want)
			if tt.want == http.StatusBadRequest && p["detail"] != errBadPath.Error() {
				t.Fatalf("detail %q, want the bad-path detail", p["detail"])
			}
			if resp.Header.Get("X-Cache") != "" || resp.Header.Get("Vary") != "" {
				t.Fatalf("a refused path reached the cache: X-Cache %q Vary %q", resp.Header.Get("X-Cache"), resp.Header.Get("Vary"))
			}
		})
	}
}

func TestAdversarialMethods(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name      string
		method    string
		give      string
		want      int
		wantAllow []string
	}{
		{name: "POST to a listing", method: http.MethodPost, give: "/realty/5", want: 405, wantAllow: []string{"GET", "PUT", "DELETE"}},
		{name: "DELETE the collection", method: http.MethodDelete, give: "/realty", want: 405, wantAllow: []string{"POST"}},
		{name: "PATCH a listing", method: http.MethodPatch, give: "/realty/1", want: 405, wantAllow: []string{"GET", "PUT", "DELETE"}},
		{name: "PUT the collection", method: http.MethodPut, give: "/realty", want: 405, wantAllow: []string{"POST"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := f.send(t, tt.method, tt.give, bearer(t, 1, 1), "")
			advProblem(t, resp, body, tt.want)
			allow := strings.Split(resp.Header.Get("Allow"), ", ")
			for _, m := range tt.wantAllow {
				if !slices.Contains(allow, m) {
					t.Fatalf("Allow = %q, want %s in it", resp.Header.Get("Allow"), m)
				}
			}
			if slices.Contains(allow, tt.method) {
				t.Fatalf("Allow = %q lists the refused method %s", resp.Header.Get("Allow"), tt.method)
			}
		})
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

// TestPassiveListingOfAnotherFirmIsUnknown: a passive listing of firm 1
// looks to firm 2, by both forms and cold or cached, exactly like a
// listing that does not exist, so its existence does not leak.
func TestPassiveListingOfAnotherFirmIsUnknown(t *testing.T) {
	f := newFixture(t)
	owner, other := bearer(t, 1, 1), bearer(t, 2, 3)
	if resp, body := f.get(t, "/realty/1", other); resp.StatusCode != http.StatusOK {
		t.Fatalf("firm 2 cannot read an active listing: %d %s", resp.StatusCode, body)
	}
	unknown := map[string]string{}
	unknownHeaders := map[string][]string{}
	for _, path := range []string{"/realty/999", "/realty/1-999"} {
		resp, body := f.get(t, path, other)
		p := advProblem(t, resp, body, http.StatusNotFound)
		unknown[path], unknownHeaders[path] = advWithoutInstance(t, p, path), advHeaderLines(resp)
	}
	tests := []struct {
		name    string
		give    string
		unknown string // the unknown listing of the same form
		warm    bool   // the owner viewed it first, so it is cached
	}{
		{name: "by id, cold", give: "/realty/2", unknown: "/realty/999"},
		{name: "by number, cold", give: "/realty/1-2", unknown: "/realty/1-999"},
		{name: "by id, cached", give: "/realty/2", unknown: "/realty/999", warm: true},
		{name: "by number, cached", give: "/realty/1-2", unknown: "/realty/1-999", warm: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.warm {
				if resp, body := f.get(t, tt.give, owner); resp.StatusCode != http.StatusOK {
					t.Fatalf("the owner cannot read it: %d %s", resp.StatusCode, body)
				}
			}
			resp, body := f.get(t, tt.give, other)
			p := advProblem(t, resp, body, http.StatusNotFound)
			if got := advWithoutInstance(t, p, tt.give); got != unknown[tt.unknown] {
				t.Fatalf("body %s differs from an unknown listing's %s", got, unknown[tt.unknown])
			}
			if got := advHeaderLines(resp); !reflect.DeepEqual(got, unknownHeaders[tt.unknown]) {
				t.Fatalf("headers %q differ from an unknown listing's %q", got, unknownHeaders[tt.unknown])
			}
			if strings.Contains(body, "passive") {
				t.Fatalf("the body leaks the listing: %s", body)
			}
		})
	}
}

// advWithoutInstance checks that a problem's instance is the path and returns
// the rest of it, re-encoded in a stable order.
func advWithoutInstance(t *testing.T, p map[string]any, path string) string {
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

// advHeaderLines lists a response's headers as "Name: values", leaving out
// those that differ between any two responses.
func advHeaderLines(resp *http.Response) []string {
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

// TestNoHeaderInjection sends paths that would split the response if a
// decoded path reached a header: none may add a Set-Cookie or any header
// value with a CR or LF, whichever part of the app answers.
func TestNoHeaderInjection(t *testing.T) {
	f := newFixture(t)
	auth := bearer(t, 1, 1)
	tests := []struct {
		name   string
		method string
		give   string
		want   int
	}{
		{name: "in the reference", method: http.MethodGet, give: "/realty/%0d%0aSet-Cookie:%20a=b", want: 400},
		{name: "after an id", method: http.MethodGet, give: "/realty/1%0d%0aSet-Cookie:%20a=b", want: 400},
		{name: "after a number", method: http.MethodGet, give: "/realty/1-1%0d%0aSet-Cookie:%20a=b", want: 400},
		{name: "LF only", method: http.MethodGet, give: "/realty/1%0aSet-Cookie:%20a=b", want: 400},
		{name: "on a write", method: http.MethodPut, give: "/realty/1%0d%0aSet-Cookie:%20a=b", want: 400},
		{name: "on an unknown route", method: http.MethodGet, give: "/x%0d%0aSet-Cookie:%20a=b", want: 404},
		{name: "on a refused method", method: http.MethodPatch, give: "/realty/1%0d%0aSet-Cookie:%20a=b", want: 405},
		{name: "in the query", method: http.MethodGet, give: "/realty/1?x=%0d%0aSet-Cookie:%20a=b", want: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := f.send(t, tt.method, tt.give, auth, "")
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
			if tt.want >= 400 {
				advProblem(t, resp, body, tt.want)
			}
			if cookies := resp.Header.Values("Set-Cookie"); len(cookies) > 0 {
				t.Fatalf("Set-Cookie %q injected", cookies)
			}
			for name, values := range resp.Header {
				for _, v := range values {
					if strings.ContainsAny(v, "\r\n") || strings.Contains(v, "a=b") {
						t.Fatalf("header %s = %q carries the injected text", name, v)
					}
				}
			}
		})
	}
}
