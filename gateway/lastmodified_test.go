package gateway

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// TestLastModified: a listing answer carries Last-Modified, the time the
// store recorded its version; If-Modified-Since gives 304 where no
// If-None-Match is sent (RFC 9110 §13.1.3, §13.2.2), and
// If-Unmodified-Since is evaluated on reads as on writes. Two versions
// written within one second never share a date: a client that holds the
// older one gets the newer, not a 304.
func TestLastModified(t *testing.T) {
	f := newFixture(t)
	auth := bearer(t, 1, 1)
	read := func(lines ...string) (*http.Response, string) {
		t.Helper()
		return f.withHeaders(t, "GET", "/realty/1", auth, "", lines...)
	}
	dateOf := func(resp *http.Response) time.Time {
		t.Helper()
		lm, err := http.ParseTime(resp.Header.Get("Last-Modified"))
		if err != nil {
			t.Fatalf("Last-Modified %q: %v", resp.Header.Get("Last-Modified"), err)
		}
		return lm
	}
	first, body := read()
	lm := first.Header.Get("Last-Modified")
	if dateOf(first).After(time.Now()) {
		t.Fatalf("Last-Modified %s is in the future", lm)
	}
	earlier := dateOf(first).Add(-time.Second).Format(http.TimeFormat)
	for _, tt := range []struct {
		name  string
		lines []string
		want  int
	}{
		{"If-Modified-Since the date", []string{"If-Modified-Since", lm}, 304},
		{"If-Modified-Since a second before", []string{"If-Modified-Since", earlier}, 200},
		{"If-Modified-Since not a date", []string{"If-Modified-Since", "yesterday"}, 200},
		{"If-None-Match wins over If-Modified-Since", []string{"If-None-Match", `"other"`, "If-Modified-Since", lm}, 200},
		{"If-Unmodified-Since the date", []string{"If-Unmodified-Since", lm}, 200},
		{"If-Unmodified-Since a second before", []string{"If-Unmodified-Since", earlier}, 412},
		{"If-Match wins over If-Unmodified-Since", []string{"If-Match", first.Header.Get("ETag"), "If-Unmodified-Since", earlier}, 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, got := read(tt.lines...)
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, got)
			}
			if tt.want == 304 && (got != "" || resp.Header.Get("Last-Modified") != lm || resp.Header.Get("ETag") != first.Header.Get("ETag")) {
				t.Fatalf("304 with body %q, Last-Modified %q, ETag %q", got, resp.Header.Get("Last-Modified"), resp.Header.Get("ETag"))
			}
		})
	}

	// Two writes at once: the client read the first one's version and
	// revalidates by its date after the second.
	put := func(lines ...string) *http.Response {
		t.Helper()
		resp, got := f.withHeaders(t, "PUT", "/realty/1", auth, body, lines...)
		if resp.StatusCode != 200 {
			t.Fatalf("PUT: %d %s", resp.StatusCode, got)
		}
		return resp
	}
	put()
	held, heldBody := read()
	put()
	resp, got := read("If-Modified-Since", held.Header.Get("Last-Modified"))
	if resp.StatusCode != 200 || got == heldBody || resp.Header.Get("ETag") == held.Header.Get("ETag") {
		t.Fatalf("If-Modified-Since of the version before (written in the same second): %d; want 200 with the new version", resp.StatusCode)
	}
	// A write that holds that date is refused as well.
	resp, got = f.withHeaders(t, "PUT", "/realty/1", auth, body, "If-Unmodified-Since", held.Header.Get("Last-Modified"))
	if resp.StatusCode != 412 {
		t.Fatalf("PUT If-Unmodified-Since of the version before: %d %s; want 412", resp.StatusCode, got)
	}
	// HEAD answers as GET does.
	head, _ := f.withHeaders(t, "HEAD", "/realty/1", auth, "", "If-Modified-Since", time.Now().Add(time.Hour).Format(http.TimeFormat))
	if head.StatusCode != 304 {
		t.Fatalf("HEAD If-Modified-Since an hour ahead: %d; want 304", head.StatusCode)
	}
}

// TestAppendHTTPDate: the gateway's formatter writes what net/http's
// TimeFormat does.
func TestAppendHTTPDate(t *testing.T) {
	for _, sec := range []int64{0, 784111777, 951782400, 1_795_870_117, 4_102_444_799, 253_402_300_799} {
		want := time.Unix(sec, 0).UTC().Format(http.TimeFormat)
		if got := string(appendHTTPDate(nil, sec)); got != want {
			t.Errorf("appendHTTPDate(%d) = %q, want %q", sec, got, want)
		}
	}
}

// BenchmarkHotHitExtras measures what the hot hit pays for preconditions
// and Last-Modified when no conditional field is sent: the scan for an
// If- line (off the wire, and for a request made in process), and the
// date's formatting.
func BenchmarkHotHitExtras(b *testing.B) {
	var wire fasthttp.Request
	head := "GET /realty/1 HTTP/1.1\r\nHost: gateway\r\nUser-Agent: Mozilla/5.0\r\nAccept: application/json\r\n" +
		"Accept-Encoding: gzip, deflate, br, zstd\r\nAuthorization: Bearer abc.def.ghi\r\nX-Request-ID: r-1\r\n\r\n"
	if err := wire.Read(bufio.NewReader(strings.NewReader(head))); err != nil {
		b.Fatal(err)
	}
	var built fasthttp.Request
	built.Header.Set("Authorization", "Bearer abc.def.ghi")
	built.Header.Set("Accept-Encoding", "gzip")
	b.Run("conditionalRead off the wire", func(b *testing.B) {
		for b.Loop() {
			if conditionalRead(&wire.Header) {
				b.Fatal("no If- field")
			}
		}
	})
	b.Run("conditionalRead in process", func(b *testing.B) {
		for b.Loop() {
			if conditionalRead(&built.Header) {
				b.Fatal("no If- field")
			}
		}
	})
	b.Run("the Peek it replaces", func(b *testing.B) {
		for b.Loop() {
			if len(wire.Header.Peek(fiber.HeaderIfNoneMatch)) > 0 {
				b.Fatal("no If-None-Match")
			}
		}
	})
	now := time.Now()
	b.Run("appendHTTPDate", func(b *testing.B) {
		var buf [32]byte
		for b.Loop() {
			appendHTTPDate(buf[:0], now.Unix()-5)
		}
	})
}
