package gateway

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/realty-gateway/gateway/cache"
)

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

// FuzzParseRef checks that parseRef never panics and accepts only the
// canonical forms: formatting the key it returns gives back the input
// exactly, so "007", "+5", "５" or "5\x00" can never name listing 5.
func FuzzParseRef(f *testing.F) {
	for _, seed := range []string{
		"1", "12-34", "007", "-5", "+5", "12-", "9223372036854775807", "9223372036854775808",
		"５", "5\x00", "1-2-3", "", "0", "-", "1-0", "0-1", "-12", "1e3", "0x10", "5 ", " 5", "5\r\n",
		"9223372036854775807-9223372036854775807", "1-9223372036854775808",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		key, ok := ParseRef(ref)
		if !ok {
			return
		}
		var formatted string
		switch {
		case key.ID != 0:
			if key.ID <= 0 || key.FirmID != 0 || key.No != 0 {
				t.Fatalf("ParseRef(%q) = %+v: an id key must have only a positive ID", ref, key)
			}
			formatted = strconv.FormatInt(key.ID, 10)
		default:
			if key.FirmID <= 0 || key.No <= 0 {
				t.Fatalf("ParseRef(%q) = %+v: a number key must have a positive firm and no", ref, key)
			}
			formatted = strconv.FormatInt(key.FirmID, 10) + "-" + strconv.FormatInt(key.No, 10)
		}
		if formatted != ref {
			t.Fatalf("ParseRef(%q) = %+v, which formats as %q: a non-canonical form was accepted", ref, key, formatted)
		}
	})
}

// TestListingPaths sends listing paths with a valid token. The canonical
// forms get the listing, or its absence; every hostile one must end in a
// 4xx problem+json: never a 200 for a path that is not the canonical
// form, never a 5xx.
func TestListingPaths(t *testing.T) {
	f := newFixture(t)
	auth := bearer(t, 1, 1)
	tests := []struct {
		name string
		give string // the request target, as sent on the wire
		want int
		// canonical: the path names a listing as the API does.
		canonical bool
		// why documents the expectation: who refuses the path and how.
		why string
	}{
		{name: "by id", give: "/realty/1", want: 200, canonical: true},
		{name: "by number", give: "/realty/1-1", want: 200, canonical: true},
		{name: "with a query", give: "/realty/1?x=1", want: 200, canonical: true},
		{name: "no such listing", give: "/realty/999", want: 404, canonical: true},

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
			if !tt.canonical && (resp.StatusCode == http.StatusOK || resp.StatusCode >= 500) {
				t.Fatalf("%s answered %d (%s): must be a 4xx: %s", tt.give, resp.StatusCode, tt.why, body)
			}
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
			if tt.want >= 400 && resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("Content-Type = %q", resp.Header.Get("Content-Type"))
			}
			if tt.canonical {
				return
			}
			p := requireProblem(t, resp, body, tt.want)
			if tt.want == http.StatusBadRequest && p["detail"] != errBadPath.Error() {
				t.Fatalf("detail %q, want the bad-path detail", p["detail"])
			}
			if resp.Header.Get("X-Cache") != "" || resp.Header.Get("Vary") != "" {
				t.Fatalf("a refused path reached the cache: X-Cache %q Vary %q", resp.Header.Get("X-Cache"), resp.Header.Get("Vary"))
			}
		})
	}
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
				requireProblem(t, resp, body, tt.want)
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
