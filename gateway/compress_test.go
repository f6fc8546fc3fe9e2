package gateway

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/coding"
)

// inflated decodes body of Content-Encoding ce.
func inflated(t *testing.T, ce string, body []byte) []byte {
	t.Helper()
	var r io.Reader
	switch ce {
	case "":
		return body
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	case "br":
		r = brotli.NewReader(bytes.NewReader(body))
	case "zstd":
		zr, err := zstd.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		r = zr
	default:
		t.Fatalf("Content-Encoding %q", ce)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s: %v", ce, err)
	}
	return b
}

// getWith reads path with the header lines given (name, value, ...).
func (f fixture) getWith(t *testing.T, path string, lines ...string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(lines); i += 2 {
		req.Header.Add(lines[i], lines[i+1])
	}
	return f.do(t, req)
}

// TestListingCodings: a listing comes in the coding Accept-Encoding picks,
// which decodes to exactly the identity body, with Content-Encoding, a
// tag of that coding's own and Vary: Accept-Encoding; the tag gives a 304
// in the same coding, with the same validators, and not in another.
func TestListingCodings(t *testing.T) {
	f := newFixture(t)
	auth := bearer(t, 1, 1)
	identity, body := f.getWith(t, "/realty/1", "Authorization", auth)
	if identity.StatusCode != 200 || identity.Header.Get("Content-Encoding") != "" {
		t.Fatalf("no Accept-Encoding: %d, Content-Encoding %q", identity.StatusCode, identity.Header.Get("Content-Encoding"))
	}
	tag := identity.Header.Get("ETag")
	tests := []struct {
		name   string
		ae     []string // Accept-Encoding lines
		wantCE string
	}{
		{"none", nil, ""},
		{"empty", []string{""}, ""},
		{"gzip", []string{"gzip"}, "gzip"},
		{"Chrome's", []string{"gzip, deflate, br, zstd"}, "gzip"},
		{"br preferred by q", []string{"gzip;q=0.8, br"}, "br"},
		{"zstd preferred by q", []string{"br;q=0.5, gzip;q=0.5, zstd"}, "zstd"},
		{"gzip on a second line", []string{"deflate", "gzip;q=0.3"}, "gzip"},
		{"identity preferred by q", []string{"gzip;q=0.1, identity"}, ""},
		{"unknown codings", []string{"compress, deflate"}, ""},
		{"star", []string{"*"}, "gzip"},
		{"identity refused", []string{"identity;q=0, zstd"}, "zstd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines := []string{"Authorization", auth}
			for _, ae := range tt.ae {
				lines = append(lines, "Accept-Encoding", ae)
			}
			resp, got := f.getWith(t, "/realty/1", lines...)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != tt.wantCE {
				t.Fatalf("%d, Content-Encoding %q; want 200, %q", resp.StatusCode, resp.Header.Get("Content-Encoding"), tt.wantCE)
			}
			if !bytes.Equal(inflated(t, tt.wantCE, []byte(got)), []byte(body)) {
				t.Fatal("the body does not decode to the identity body")
			}
			wantTag := tag
			if tt.wantCE != "" {
				wantTag = strings.TrimSuffix(tag, `"`) + map[string]string{"gzip": ".gz", "br": ".br", "zstd": ".zst"}[tt.wantCE] + `"`
			}
			if resp.Header.Get("ETag") != wantTag {
				t.Fatalf("ETag %s, want %s", resp.Header.Get("ETag"), wantTag)
			}
			if v := resp.Header.Values("Vary"); len(v) != 1 || !strings.Contains(v[0], "Accept-Encoding") {
				t.Fatalf("Vary %q", v)
			}
			if resp.Header.Get("Content-Length") != "" && resp.ContentLength != int64(len(got)) {
				t.Fatalf("Content-Length %d for %d bytes", resp.ContentLength, len(got))
			}
			notModified, rest := f.getWith(t, "/realty/1", append(lines, "If-None-Match", wantTag)...)
			if notModified.StatusCode != 304 || rest != "" {
				t.Fatalf("If-None-Match %s: %d %q; want 304", wantTag, notModified.StatusCode, rest)
			}
			for _, h := range []string{"ETag", "Vary", "Cache-Control"} {
				if notModified.Header.Get(h) != resp.Header.Get(h) {
					t.Errorf("304 %s %q, the 200's %q", h, notModified.Header.Get(h), resp.Header.Get(h))
				}
			}
			if ce := notModified.Header.Get("Content-Encoding"); ce != "" {
				t.Errorf("304 with Content-Encoding %q", ce)
			}
			other := tag
			if tt.wantCE == "" {
				other = strings.TrimSuffix(tag, `"`) + `.gz"`
			}
			if resp, _ := f.getWith(t, "/realty/1", append(lines, "If-None-Match", other)...); resp.StatusCode != 200 {
				t.Fatalf("If-None-Match with another coding's tag %s: %d; want 200", other, resp.StatusCode)
			}
		})
	}
	for _, refused := range [][]string{{"identity;q=0"}, {"*;q=0"}, {"identity;q=0", "deflate"}} {
		lines := []string{"Authorization", auth}
		for _, ae := range refused {
			lines = append(lines, "Accept-Encoding", ae)
		}
		resp, got := f.getWith(t, "/realty/1", lines...)
		if resp.StatusCode != 406 || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(resp.Header.Get("Vary"), "Accept-Encoding") {
			t.Fatalf("Accept-Encoding %q: %d %s, Vary %q; want a 406 problem varying by Accept-Encoding", refused, resp.StatusCode, got, resp.Header.Get("Vary"))
		}
	}
}

// TestCompressedHitsCompressNothing: hits in every coding, of both keys,
// compress each coding of the version once, at its first request.
func TestCompressedHitsCompressNothing(t *testing.T) {
	var listings *cache.Cache
	f := newFixtureOf(t, fixtureOptions{listings: func(l Listings) Listings {
		listings = l.(*cache.Cache)
		return l
	}})
	auth := bearer(t, 1, 1)
	for range 10 {
		for _, path := range []string{"/realty/1", "/realty/1-1"} {
			for _, ae := range []string{"gzip", "br", "zstd", "gzip, deflate, br, zstd"} {
				if resp, body := f.getWith(t, path, "Authorization", auth, "Accept-Encoding", ae); resp.StatusCode != 200 {
					t.Fatalf("%s, %s: %d %s", path, ae, resp.StatusCode, body)
				}
			}
		}
	}
	if got := listings.Stats().Compressed; got != 3 {
		t.Fatalf("80 reads in 3 codings compressed %d times; want 3", got)
	}
}

// enlarging answers every compressed variant with a body longer than the
// identity one, as a coding does on a small or incompressible body.
type enlarging struct{ Listings }

func (enlarging) Variant(e cache.Entry, cod coding.Coding) ([]byte, error) {
	if cod == coding.Identity {
		return e.Body, nil
	}
	return append(slices.Clone(e.Body), "padding"...), nil
}

// TestNoCodingEnlargesABody: a coding is sent only where it makes the
// body smaller; else the identity body goes, with its own tag, unless the
// client refuses identity. The public documents, of which the one-key JWKS
// is smaller than any of its codings, and a listing whose codings would be
// larger.
func TestNoCodingEnlargesABody(t *testing.T) {
	f := newFixtureOf(t, fixtureOptions{tokenAlg: "EdDSA"})
	for _, path := range []string{jwksPath, "/openapi.yaml"} {
		_, identity := f.withHeaders(t, http.MethodGet, path, "", "")
		for _, ae := range []string{"gzip", "br", "zstd", "gzip, deflate, br, zstd"} {
			resp, body := f.withHeaders(t, http.MethodGet, path, "", "", "Accept-Encoding", ae)
			if ce := resp.Header.Get("Content-Encoding"); len(body) >= len(identity) && ce != "" {
				t.Errorf("%s, Accept-Encoding %s: %s of %d bytes for a body of %d", path, ae, ce, len(body), len(identity))
			}
		}
	}

	f = newFixtureOf(t, fixtureOptions{listings: func(l Listings) Listings { return enlarging{l} }})
	auth := bearer(t, 1, 1)
	plain, identity := f.get(t, "/realty/1", auth)
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		resp, body := f.withHeaders(t, method, "/realty/1", auth, "", "Accept-Encoding", "gzip, br")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "" || resp.Header.Get("ETag") != plain.Header.Get("ETag") ||
			method == http.MethodGet && body != identity || resp.Header.Get("Vary") != plain.Header.Get("Vary") {
			t.Errorf("%s, codings that enlarge it: %d, Content-Encoding %q, ETag %q, Vary %q; want the identity body, tag and Vary",
				method, resp.StatusCode, resp.Header.Get("Content-Encoding"), resp.Header.Get("ETag"), resp.Header.Get("Vary"))
		}
	}
	resp, _ := f.withHeaders(t, http.MethodGet, "/realty/1", auth, "", "Accept-Encoding", "gzip", "If-None-Match", plain.Header.Get("ETag"))
	if resp.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match of the identity tag, gzip accepted: %d; want 304", resp.StatusCode)
	}
	resp, body := f.withHeaders(t, http.MethodGet, "/realty/1", auth, "", "Accept-Encoding", "gzip, identity;q=0")
	if resp.Header.Get("Content-Encoding") != "gzip" || len(body) <= len(identity) {
		t.Errorf("identity refused: Content-Encoding %q, %d bytes; want the gzip variant", resp.Header.Get("Content-Encoding"), len(body))
	}
}
