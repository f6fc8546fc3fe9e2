package gateway

import (
	"bufio"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/internal/testenv"
)

// expectExchange sends a request head with Expect: 100-continue on a new
// connection to addr and reads the first answer. Where that is 100
// Continue it sends body and reads the final answer too. sawContinue says
// whether a 100 came.
func expectExchange(t *testing.T, addr, method, path string, lines []string, body string) (resp *http.Response, respBody string, sawContinue bool) {
	t.Helper()
	c := dialGateway(t, addr)
	c.SetDeadline(time.Now().Add(testenv.Patience())) // against a hang only
	head := method + " " + path + " HTTP/1.1\r\nHost: gateway\r\nUser-Agent: expect-test\r\nExpect: 100-continue\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n"
	for i := 0; i+1 < len(lines); i += 2 {
		head += lines[i] + ": " + lines[i+1] + "\r\n"
	}
	if _, err := io.WriteString(c, head+"\r\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusContinue {
		sawContinue = true
		if _, err := io.WriteString(c, body); err != nil {
			t.Fatal(err)
		}
		if resp, err = http.ReadResponse(r, nil); err != nil {
			t.Fatal(err)
		}
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp, string(b), sawContinue
}

// TestExpectContinue: a write refused on its head is answered before 100
// Continue, so its body is never sent (RFC 9110 §10.1.1), with the
// problem the error handler makes; one that may go on gets 100 Continue
// and then its answer.
func TestExpectContinue(t *testing.T) {
	f := newFixtureWith(t, func(c *Config) { c.BodyLimit = 4096; c.RequirePrecondition = true }, NoPurge{})
	addr := serveThroughListener(t, f)
	auth := bearer(t, 1, 1)
	read, listing := f.get(t, "/realty/1", auth)
	tag := read.Header.Get("ETag")
	json := []string{"Content-Type", "application/json"}
	with := func(lines ...string) []string { return append(slices.Clone(json), lines...) }
	for _, tt := range []struct {
		name         string
		method, path string
		lines        []string
		body         string
		want         int
		wantContinue bool
	}{
		{"no token", "POST", "/realty", json, newListing, 401, false},
		{"bad token", "PUT", "/realty/1", with("Authorization", "Bearer x.y.z", "If-Match", tag), listing, 401, false},
		{"create with If-Match", "POST", "/realty", with("Authorization", auth, "If-Match", `"stale"`), newListing, 412, false},
		{"update with a stale If-Match", "PUT", "/realty/1", with("Authorization", auth, "If-Match", `"stale"`), listing, 412, false},
		{"update without a precondition", "PUT", "/realty/1", with("Authorization", auth), listing, 428, false},
		{"delete with a stale If-Match", "DELETE", "/realty/1", with("Authorization", auth, "If-Match", `"stale"`), "", 412, false},
		{"body over the limit", "POST", "/realty", with("Authorization", auth), strings.Repeat(" ", 5000), 413, false},
		{"not JSON", "POST", "/realty", []string{"Authorization", auth, "Content-Type", "text/plain"}, newListing, 415, false},
		{"no such listing", "PUT", "/realty/99", with("Authorization", auth, "If-Match", tag), listing, 404, false},
		{"create", "POST", "/realty", with("Authorization", auth), newListing, 201, true},
		{"update", "PUT", "/realty/1", with("Authorization", auth, "If-Match", tag), listing, 200, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body, sawContinue := expectExchange(t, addr, tt.method, tt.path, tt.lines, tt.body)
			if resp.StatusCode != tt.want || sawContinue != tt.wantContinue {
				t.Fatalf("status %d after 100 Continue: %v; want %d, 100 Continue: %v: %s",
					resp.StatusCode, sawContinue, tt.want, tt.wantContinue, body)
			}
			if tt.want >= 400 {
				if resp.Header.Get("Content-Type") != "application/problem+json" || resp.Header.Get("X-Request-Id") == "" {
					t.Fatalf("refusal without its problem: %v %s", resp.Header, body)
				}
				if p := decode(t, body); p["status"] != float64(tt.want) || p["title"] != statusTitle(tt.want) {
					t.Fatalf("problem %s", body)
				}
			}
		})
	}
	// The refused DELETE deleted nothing; the update went through.
	if resp, body := f.get(t, "/realty/1", auth); resp.StatusCode != 200 || resp.Header.Get("ETag") == tag {
		t.Fatalf("after: %d %s %s", resp.StatusCode, resp.Header.Get("ETag"), body)
	}
}
