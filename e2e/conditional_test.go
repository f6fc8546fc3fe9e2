package e2e

// End-to-end tests of conditional writes (RFC 9110 §13): each
// precondition form on PUT and DELETE on both engines, two gateways racing
// with the same If-Match, and a write by another writer in SQL between a
// client's read and its write.

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"

	"github.com/realty-gateway/gateway/internal/testenv"
)

// conditional sends a write of path with tok and the precondition header
// lines given (name, value, name, value...; a name may repeat).
func conditional(t *testing.T, p *process, method, path, tok, body string, lines ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, p.Base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("User-Agent", "e2e-test")
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(lines); i += 2 {
		req.Header.Add(lines[i], lines[i+1])
	}
	return doRaw(t, req)
}

// doRaw sends req with no transparent decompression, so that the body and
// its headers are as sent.
func doRaw(t *testing.T, req *http.Request) response {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// etagOf reads path with tok in the coding ae asks for and returns the
// answer's ETag.
func etagOf(t *testing.T, p *process, path, tok, ae string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, p.Base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if ae != "" {
		req.Header.Set("Accept-Encoding", ae)
	}
	r := doRaw(t, req)
	if r.status != 200 || r.header.Get("ETag") == "" {
		t.Fatalf("GET %s: %d, ETag %q: %s", path, r.status, r.header.Get("ETag"), r.body)
	}
	return r.header.Get("ETag")
}

// TestEndToEndConditionalWrites: on each engine, every precondition form
// on PUT and DELETE either writes (and its answer is the write's) or is
// 412 and leaves the listing as it was.
func TestEndToEndConditionalWrites(t *testing.T) {
	engines := []struct {
		name string
		env  func(t *testing.T) environment
	}{
		{"sqlite", sqliteEnv},
		{"postgres", func(t *testing.T) environment {
			e, _ := postgresEnv(t, testenv.PostgresURL(t), testenv.RedisAddr(t))
			return e
		}},
	}
	for _, engine := range engines {
		t.Run(engine.name, func(t *testing.T) {
			e := engine.env(t)
			w := newWorld(t, e)
			p := start(t, e)
			tok := p.token(t, w.otpLogin())
			const path = "/realty/1001"
			body := func(title string) string {
				return fmt.Sprintf(`{"title":%q,"categoryId":2,"location":{"cityId":34}}`, title)
			}
			tests := []struct {
				name  string
				lines func(tag string) []string // header lines, given the current identity tag
				want  int
			}{
				{"absent", func(string) []string { return nil }, 200},
				{"If-Match current", func(tag string) []string { return []string{"If-Match", tag} }, 200},
				{"If-Match another", func(string) []string { return []string{"If-Match", `"AAAAAAAAAAAAAAAAAAAAAA"`} }, 412},
				{"If-Match weak current", func(tag string) []string { return []string{"If-Match", "W/" + tag} }, 412},
				{"If-Match list", func(tag string) []string { return []string{"If-Match", `"a", ` + tag + `, "b"`} }, 200},
				{"If-Match on two lines", func(tag string) []string { return []string{"If-Match", `"a"`, "If-Match", tag} }, 200},
				{"If-Match gzip tag of the current version", func(tag string) []string {
					return []string{"If-Match", strings.TrimSuffix(tag, `"`) + `.gz"`}
				}, 200},
				{"If-Match *", func(string) []string { return []string{"If-Match", "*"} }, 200},
				{"If-Match malformed", func(string) []string { return []string{"If-Match", "abc"} }, 400},
				{"If-Match * in a list", func(tag string) []string { return []string{"If-Match", "*, " + tag} }, 400},
				{"If-None-Match *", func(string) []string { return []string{"If-None-Match", "*"} }, 412},
				{"If-None-Match current", func(tag string) []string { return []string{"If-None-Match", tag} }, 412},
				{"If-None-Match weak current", func(tag string) []string { return []string{"If-None-Match", "W/" + tag} }, 412},
				{"If-None-Match another", func(string) []string { return []string{"If-None-Match", `"x"`} }, 200},
				{"If-Unmodified-Since past", func(string) []string {
					return []string{"If-Unmodified-Since", "Sat, 01 Jan 2000 00:00:00 GMT"}
				}, 412},
				{"If-Unmodified-Since future", func(string) []string {
					return []string{"If-Unmodified-Since", "Fri, 01 Jan 2100 00:00:00 GMT"}
				}, 200},
				{"If-Unmodified-Since not a date: ignored", func(string) []string { return []string{"If-Unmodified-Since", "yesterday"} }, 200},
				{"If-Match wins over If-Unmodified-Since", func(tag string) []string {
					return []string{"If-Match", tag, "If-Unmodified-Since", "Sat, 01 Jan 2000 00:00:00 GMT"}
				}, 200},
			}
			for i, tt := range tests {
				t.Run("PUT "+tt.name, func(t *testing.T) {
					tag := etagOf(t, p, path, tok, "")
					title := fmt.Sprintf("v%d", i)
					r := conditional(t, p, http.MethodPut, path, tok, body(title), tt.lines(tag)...)
					if r.status != tt.want {
						t.Fatalf("status %d, want %d: %s", r.status, tt.want, r.body)
					}
					after := p.view(t, path, tok)
					wrote := strings.Contains(string(after.body), fmt.Sprintf(`"title":%q`, title))
					if wrote != (tt.want == 200) {
						t.Fatalf("after a %d the listing reads %s", r.status, after.body)
					}
					afterTag := etagOf(t, p, path, tok, "")
					if tt.want != 200 && afterTag != tag {
						t.Fatalf("a refused write changed the ETag from %s to %s", tag, afterTag)
					}
					if tt.want == 200 && (r.header.Get("ETag") != "" || r.header.Get("Listing-ETag") != afterTag) {
						t.Fatalf("PUT answered ETag %q, Listing-ETag %q; want none and the read's %q",
							r.header.Get("ETag"), r.header.Get("Listing-ETag"), afterTag)
					}
				})
			}
			// Deletes: the refused forms first, on the same listing; then
			// one that holds.
			tag := etagOf(t, p, path, tok, "")
			for _, lines := range [][]string{
				{"If-Match", `"AAAAAAAAAAAAAAAAAAAAAA"`},
				{"If-Match", "W/" + tag},
				{"If-None-Match", "*"},
				{"If-None-Match", tag},
				{"If-Unmodified-Since", "Sat, 01 Jan 2000 00:00:00 GMT"},
			} {
				if r := conditional(t, p, http.MethodDelete, path, tok, "", lines...); r.status != 412 {
					t.Fatalf("DELETE %q: %d, want 412: %s", lines, r.status, r.body)
				}
				if r := p.view(t, path, tok); r.status != 200 {
					t.Fatalf("after a refused DELETE %q: %d", lines, r.status)
				}
			}
			for _, lines := range [][]string{{"If-Match", "abc"}, {"If-Match", "*, " + tag}} {
				if r := conditional(t, p, http.MethodDelete, path, tok, "", lines...); r.status != 400 {
					t.Fatalf("DELETE %q: %d, want 400: %s", lines, r.status, r.body)
				}
				if r := p.view(t, path, tok); r.status != 200 {
					t.Fatalf("after a malformed DELETE %q: %d", lines, r.status)
				}
			}
			if r := conditional(t, p, http.MethodDelete, path, tok, "", "If-Match", `"x", `+tag); r.status != 204 {
				t.Fatalf("DELETE with the current tag in a list: %d: %s", r.status, r.body)
			}
			if r := p.view(t, path, tok); r.status != 404 {
				t.Fatalf("after the DELETE: %d", r.status)
			}
			// The forms that hold without naming a tag, each on a listing
			// of its own: If-Match: *, a past-proof If-Unmodified-Since,
			// If-None-Match of another tag, and none at all.
			for _, lines := range [][]string{
				{"If-Match", "*"},
				{"If-Unmodified-Since", "Fri, 01 Jan 2100 00:00:00 GMT"},
				{"If-None-Match", `"x"`},
				nil,
			} {
				created := conditional(t, p, http.MethodPost, "/realty", tok, body("to delete"))
				loc := created.header.Get("Location")
				if created.status != 201 || loc == "" {
					t.Fatalf("POST: %d, Location %q: %s", created.status, loc, created.body)
				}
				if r := conditional(t, p, http.MethodDelete, loc, tok, "", lines...); r.status != 204 {
					t.Fatalf("DELETE %q: %d, want 204: %s", lines, r.status, r.body)
				}
				if r := p.view(t, loc, tok); r.status != 404 {
					t.Fatalf("after DELETE %q: %d", lines, r.status)
				}
			}
		})
	}
}

// TestEndToEndConditionalRace: 50 rounds of two PUTs with the same
// If-Match, at once, through two gateways on one PostgreSQL and Redis:
// exactly one is 200 and the other 412 each round, and both gateways then
// read the winner's listing.
func TestEndToEndConditionalRace(t *testing.T) {
	e, _ := postgresEnv(t, testenv.PostgresURL(t), testenv.RedisAddr(t))
	w := newWorld(t, e)
	gws := []*process{start(t, e), start(t, e)}
	tok := gws[0].token(t, w.otpLogin())
	const path = "/realty/1001"
	for round := range 50 {
		tag := etagOf(t, gws[round%2], path, tok, "")
		var wg sync.WaitGroup
		results := make([]response, 2)
		for i, p := range gws {
			wg.Go(func() {
				body := fmt.Sprintf(`{"title":"round %d by %d","categoryId":2,"location":{"cityId":34}}`, round, i)
				r, err := send2(p, path, tok, body, tag)
				if err != nil {
					t.Errorf("round %d, gateway %d: %v", round, i, err)
				}
				results[i] = r
			})
		}
		wg.Wait()
		var winner = -1
		for i, r := range results {
			switch r.status {
			case 200:
				if winner >= 0 {
					t.Fatalf("round %d: both PUTs with If-Match %s answered 200", round, tag)
				}
				winner = i
			case 412:
			default:
				t.Fatalf("round %d, gateway %d: %d %s", round, i, r.status, r.body)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: neither PUT wrote (%d, %d)", round, results[0].status, results[1].status)
		}
		want := fmt.Sprintf(`"title":"round %d by %d"`, round, winner)
		for i, p := range gws {
			if r := p.view(t, path, tok); !strings.Contains(string(r.body), want) {
				t.Fatalf("round %d: gateway %d reads %s; want the winner's %s", round, i, r.body, want)
			}
		}
	}
}

// send2 sends a conditional PUT without failing the test, for goroutines.
func send2(p *process, path, tok, body, ifMatch string) (response, error) {
	return p.do(http.MethodPut, path, map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json",
		"If-Match": ifMatch}, body)
}

// TestEndToEndConditionalAfterSQLWrite: on each engine, the listing
// application changes a listing in SQL after a client read it; the
// client's PUT with the ETag it read is 412, and once its read shows the
// new version, a PUT with that read's ETag is 200.
func TestEndToEndConditionalAfterSQLWrite(t *testing.T) {
	type engine struct {
		name string
		env  func(t *testing.T) environment
		// exec runs stmt on e's database as another writer.
		exec func(t *testing.T, e environment, stmt string)
	}
	for _, eng := range []engine{
		{"sqlite", sqliteEnv, func(t *testing.T, e environment, stmt string) {
			path := strings.TrimPrefix(e["GATEWAY_STORE_URL"], "sqlite:")
			db, err := sql.Open("sqlite", filepath.Clean(path)+"?_pragma=busy_timeout(10000)")
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.ExecContext(context.Background(), stmt); err != nil {
				t.Fatal(err)
			}
		}},
		{"postgres", func(t *testing.T) environment {
			e, _ := postgresEnv(t, testenv.PostgresURL(t), testenv.RedisAddr(t))
			return e
		}, func(t *testing.T, e environment, stmt string) {
			db, err := pgx.Connect(context.Background(), e["GATEWAY_STORE_URL"])
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close(context.Background())
			if _, err := db.Exec(context.Background(), stmt); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(eng.name, func(t *testing.T) {
			e := eng.env(t)
			w := newWorld(t, e)
			p := start(t, e)
			tok := p.token(t, w.otpLogin())
			const path = "/realty/1001"
			read := etagOf(t, p, path, tok, "gzip")
			eng.exec(t, e, `UPDATE listings SET document = REPLACE(document, '"title":"Sea view"', '"title":"By the listing application"') WHERE id = 1001`)
			body := `{"title":"By the agent","categoryId":2,"location":{"cityId":34}}`
			if r := conditional(t, p, http.MethodPut, path, tok, body, "If-Match", read); r.status != 412 {
				t.Fatalf("PUT with the ETag read before the SQL write: %d, want 412: %s", r.status, r.body)
			}
			var current string
			testenv.WaitFor(t, func() bool {
				r := p.view(t, path, tok)
				current = r.header.Get("ETag")
				return strings.Contains(string(r.body), "By the listing application")
			})
			if r := conditional(t, p, http.MethodPut, path, tok, body, "If-Match", current); r.status != 200 {
				t.Fatalf("PUT with the ETag of the new version: %d, want 200: %s", r.status, r.body)
			}
		})
	}
}
