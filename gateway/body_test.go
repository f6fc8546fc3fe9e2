package gateway

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/realty-gateway/gateway/internal/gatewaytest"
)

func TestCompressedBodiesAreRefused(t *testing.T) {
	f := newFixture(t)
	auth := bearer(t, 1, 1)
	login := []byte(loginBody("pw@one.example", testPassword, testKey))
	gzipLogin := gatewaytest.GzipBomb(10, 1) // a small login, gzipped
	routes := []struct {
		method, path, auth string
	}{
		{method: http.MethodPost, path: "/auth/login"},
		{method: http.MethodPost, path: "/realty", auth: auth},
		{method: http.MethodPut, path: "/realty/1", auth: auth},
	}
	tests := []struct {
		name string
		give []string // Content-Encoding lines
		body []byte
	}{
		{name: "gzip", give: []string{"gzip"}, body: gzipLogin},
		{name: "deflate", give: []string{"deflate"}, body: login},
		{name: "br", give: []string{"br"}, body: login},
		{name: "chained", give: []string{"gzip, gzip"}, body: gatewaytest.GzipBomb(10, 2)},
		{name: "upper case", give: []string{"GZIP"}, body: gzipLogin},
		{name: "identity, then gzip", give: []string{"identity, gzip"}, body: gzipLogin},
		{name: "second header line", give: []string{"identity", "gzip"}, body: gzipLogin},
		{name: "unknown coding", give: []string{"zstd"}, body: login},
	}
	for _, r := range routes {
		for _, tt := range tests {
			t.Run(r.method+" "+r.path+"/"+tt.name, func(t *testing.T) {
				req := httptest.NewRequest(r.method, r.path, bytes.NewReader(tt.body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("User-Agent", "test")
				if r.auth != "" {
					req.Header.Set("Authorization", r.auth)
				}
				for _, line := range tt.give {
					req.Header.Add("Content-Encoding", line)
				}
				resp, body := f.do(t, req)
				if resp.StatusCode != http.StatusUnsupportedMediaType || resp.Header.Get("Content-Type") != "application/problem+json" {
					t.Fatalf("status %d (%s), want 415 problem+json: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
				}
				if resp.Header.Get("Accept-Encoding") != "identity" || !strings.Contains(body, "identity") {
					t.Fatalf("Accept-Encoding %q, body %s: want the supported coding named", resp.Header.Get("Accept-Encoding"), body)
				}
			})
		}
	}
	t.Run("identity is accepted", func(t *testing.T) {
		resp, body := f.login(t, string(login), map[string]string{"Content-Encoding": "identity"})
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	})
}

// TestCompressionBombDoesNotInflate sends a login whose body is a 64 MiB
// JSON string compressed twice (about 70 KiB on the wire at most) and
// expects the process's allocations to stay far below the inflated size.
func TestCompressionBombDoesNotInflate(t *testing.T) {
	f := newFixture(t)
	bomb := gatewaytest.GzipBomb(64<<20, 2)
	if len(bomb) > 1<<20 {
		t.Fatalf("bomb of %d bytes does not fit the body limit", len(bomb))
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var statuses []int
	for range 4 {
		req := httptest.NewRequest(http.MethodPost, "/auth/login", bytes.NewReader(bomb))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "test")
		req.Header.Set("Content-Encoding", "gzip, gzip")
		resp, _ := f.do(t, req)
		statuses = append(statuses, resp.StatusCode)
	}
	runtime.ReadMemStats(&after)
	grew := after.TotalAlloc - before.TotalAlloc
	if grew > 16<<20 {
		t.Fatalf("four bombs allocated %d MiB; the body was inflated", grew>>20)
	}
	t.Logf("four %d-byte bombs (64 MiB inflated) allocated %d KiB", len(bomb), grew>>10)
	for _, s := range statuses {
		if s != http.StatusUnsupportedMediaType {
			t.Fatalf("statuses %v, want 415", statuses)
		}
	}
}

// TestOnlyJSONBodyReadsTheBody keeps every handler on jsonBody: Fiber's
// Ctx.Body inflates compressed bodies without a bound.
func TestOnlyJSONBodyReadsTheBody(t *testing.T) {
	files, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	call := regexp.MustCompile(`\.Body\(\)`)
	for _, e := range files {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			if call.MatchString(line) && !strings.Contains(line, "Response().Body()") &&
				!(name == "body.go" && strings.Contains(line, "c.Request().Body()")) {
				t.Errorf("%s:%d reads a body outside jsonBody: %s", name, i+1, strings.TrimSpace(line))
			}
		}
	}
}
