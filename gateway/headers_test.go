package gateway

import (
	"bufio"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// parsedRequest is a request as the server parses it from the wire, its
// field names in any case.
func parsedRequest(t testing.TB, fields string) *fasthttp.Request {
	t.Helper()
	var r fasthttp.Request
	raw := "GET /realty/1 HTTP/1.1\r\nHost: example.com\r\n" + fields + "\r\n"
	if err := r.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatal(err)
	}
	return &r
}

func TestRequestFieldsReadWhatTheClientSent(t *testing.T) {
	r := parsedRequest(t, "x-request-id: abc\r\nAUTHORIZATION: Bearer t\r\n"+
		"accept-encoding: gzip\r\nCookie: a=1; b=2\r\nAccept-Encoding: br;q=0.5\r\n")
	h := &r.Header
	tests := []struct {
		name string
		want string
	}{
		{canonicalRequestID, "abc"},
		{"Authorization", "Bearer t"},
		{"Accept-Encoding", "gzip"},
		{"If-None-Match", ""},
	}
	for _, tt := range tests {
		if got := string(requestField(h, tt.name)); got != tt.want {
			t.Errorf("requestField(%s) = %q, want %q", tt.name, got, tt.want)
		}
	}
	got := requestFields(h, "Accept-Encoding", nil)
	if want := [][]byte{[]byte("gzip"), []byte("br;q=0.5")}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("requestFields(Accept-Encoding) = %q, want %q", got, want)
	}
	if got := requestFields(h, "If-None-Match", nil); len(got) != 0 {
		t.Errorf("requestFields(If-None-Match) = %q, want none", got)
	}
}

// BenchmarkRequestFields compares fasthttp's Peek and PeekAll, which
// normalize the name on each call, with reading it in canonical form.
func BenchmarkRequestFields(b *testing.B) {
	r := parsedRequest(b, "User-Agent: wrk\r\nAccept: */*\r\nAuthorization: Bearer abc.def.ghi\r\n"+
		"Accept-Encoding: gzip, deflate, br, zstd\r\nAccept-Language: en\r\n")
	h := &r.Header
	var lines [4][]byte
	cases := []struct {
		name string
		read func() int
	}{
		{"Peek", func() int { return len(h.Peek("Authorization")) }},
		{"requestField", func() int { return len(requestField(h, "Authorization")) }},
		{"PeekAll", func() int { return len(h.PeekAll("Accept-Encoding")) }},
		{"requestFields", func() int { return len(requestFields(h, "Accept-Encoding", lines[:0])) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if c.read() == 0 {
					b.Fatal("not found")
				}
			}
		})
	}
}
