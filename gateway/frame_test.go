package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
)

func TestRequestID(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name string
		give string
		keep bool
	}{
		{name: "well formed is echoed", give: "abc-DEF_1.2:3", keep: true},
		{name: "absent is generated"},
		{name: "bad characters are replaced", give: "a b<script>"},
		{name: "too long is replaced", give: strings.Repeat("a", maxRequestIDLen+1)},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/realty/1", nil) // a 401: errors carry it too
			if tt.give != "" {
				req.Header.Set(headerRequestID, tt.give)
			}
			resp, _ := f.do(t, req)
			got := resp.Header.Get(headerRequestID)
			switch {
			case tt.keep && got != tt.give:
				t.Fatalf("X-Request-ID %q, want %q", got, tt.give)
			case !tt.keep && (got == "" || got == tt.give || !validRequestID([]byte(got)) || seen[got]):
				t.Fatalf("X-Request-ID %q: want a fresh, well-formed id", got)
			}
			seen[got] = true
		})
	}
}

func TestPanicBecomesAProblem(t *testing.T) {
	var logged bytes.Buffer
	f := newFixtureOf(t, fixtureOptions{log: &logged})
	f.app.Get("/test-only/panic", func(*fiber.Ctx) error { panic("internal detail 1f2e3d") })

	req := httptest.NewRequest(http.MethodGet, "/test-only/panic", nil)
	req.Header.Set(headerRequestID, "trace-me-42")
	resp, body := f.do(t, req)
	if resp.StatusCode != 500 || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("status %d (%s): %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if strings.Contains(body, "1f2e3d") || strings.Contains(body, "goroutine") {
		t.Fatalf("the body shows internals: %s", body)
	}
	if resp.Header.Get(headerRequestID) != "trace-me-42" {
		t.Fatalf("X-Request-ID %q, want the incoming one", resp.Header.Get(headerRequestID))
	}
	if got := f.srv.Panics(); got != 1 {
		t.Fatalf("Panics() = %d, want 1", got)
	}
	var errorLines []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(logged.Bytes()), []byte("\n")) {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["level"] == "ERROR" {
			errorLines = append(errorLines, rec)
		}
	}
	if len(errorLines) != 1 {
		t.Fatalf("%d error lines, want 1: %s", len(errorLines), logged.String())
	}
	rec := errorLines[0]
	stack, _ := rec["stack"].(string)
	if rec["requestId"] != "trace-me-42" || !strings.Contains(stack, "frame_test.go") {
		t.Fatalf("error line without request id or stack: %v", rec)
	}

	// The process goes on serving.
	if resp, body := f.get(t, "/realty/1", bearer(t, 1, 1)); resp.StatusCode != 200 {
		t.Fatalf("after the panic: status %d: %s", resp.StatusCode, body)
	}
}

func TestUnparsableRequestIsAProblemWithoutAPath(t *testing.T) {
	f := newFixture(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go f.app.Listener(ln) //nolint:errcheck // ends with Shutdown
	t.Cleanup(func() { f.app.Shutdown() })
	conn, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	// A control character in a header value: the parser refuses it.
	if _, err := io.WriteString(conn, "GET /realty/1 HTTP/1.1\r\nHost: x\r\nX-Bad: a\x01b\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var problem problemBody
	if err := json.NewDecoder(resp.Body).Decode(&problem); err != nil {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	if resp.StatusCode != 400 || problem.Instance != "" || problem.Detail == "" || resp.Header.Get(headerRequestID) == "" ||
		resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("status %d, body %+v, request id %q: want a 400 problem with a detail, no instance, and a request id",
			resp.StatusCode, problem, resp.Header.Get(headerRequestID))
	}
}
