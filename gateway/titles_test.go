package gateway

import (
	"bufio"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/internal/testenv"
)

// TestProblemTitlesAreRFC9110Phrases: a problem's title, and its status
// line, are the reason phrase of RFC 9110 §15, not the older one net/http,
// Fiber and fasthttp still give (413 "Request Entity Too Large", 422
// "Unprocessable Entity").
func TestProblemTitlesAreRFC9110Phrases(t *testing.T) {
	f := newFixtureWith(t, func(c *Config) { c.BodyLimit = 64 }, NoPurge{})
	auth := bearer(t, 1, 1)
	t.Run("413", func(t *testing.T) {
		// Refused on its Content-Length by the HTTP server, before any
		// route: only the head is sent.
		c := dialGateway(t, serveThroughListener(t, f))
		c.SetDeadline(time.Now().Add(testenv.Patience())) // against a hang only
		head := "POST /realty HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\nContent-Length: 100\r\n" +
			"Authorization: " + auth + "\r\n\r\n"
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if p := requireProblem(t, resp, string(body), http.StatusRequestEntityTooLarge); p["title"] != "Content Too Large" {
			t.Fatalf("title %q, want Content Too Large", p["title"])
		}
		if resp.Status != "413 Content Too Large" { // the status line says the title too
			t.Fatalf("status line %q, want 413 Content Too Large", resp.Status)
		}
	})
	t.Run("422", func(t *testing.T) {
		resp, body := f.send(t, http.MethodPost, "/realty", auth, `{"title":"t"}`)
		if p := requireProblem(t, resp, body, http.StatusUnprocessableEntity); p["title"] != "Unprocessable Content" {
			t.Fatalf("title %q, want Unprocessable Content", p["title"])
		}
		if resp.Status != "422 Unprocessable Content" {
			t.Fatalf("status line %q, want 422 Unprocessable Content", resp.Status)
		}
	})
	// Every status the gateway answers with a problem, and RFC 9110's
	// phrase for it (RFC 6585's for 428, 429 and 431).
	for status, phrase := range map[int]string{
		400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
		406: "Not Acceptable", 409: "Conflict", 412: "Precondition Failed", 413: "Content Too Large",
		414: "URI Too Long", 415: "Unsupported Media Type", 416: "Range Not Satisfiable", 417: "Expectation Failed",
		422: "Unprocessable Content", 428: "Precondition Required", 429: "Too Many Requests",
		431: "Request Header Fields Too Large", 500: "Internal Server Error", 503: "Service Unavailable",
	} {
		if got := statusTitle(status); got != phrase {
			t.Errorf("statusTitle(%d) = %q, want %q", status, got, phrase)
		}
	}
}
