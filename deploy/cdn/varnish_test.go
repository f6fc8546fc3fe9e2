// Package cdn_test runs the shipped varnish.vcl in a real Varnish in front
// of a real gateway (PostgreSQL, Redis), with the gateway purging through
// xkey. It is opt-in (GATEWAY_VARNISH=1, set by .ci/run, which installs
// varnish and varnish-modules where missing).
package cdn_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/realty-gateway/gateway/internal/faultproxy"
	"github.com/realty-gateway/gateway/internal/gatewaytest"
	"github.com/realty-gateway/gateway/internal/testenv"
)

const originSecret = "varnish-test-origin-secret-0123456789"

// edge is a gateway in CDN mode behind Varnish: the gateway reaches
// Varnish's purge port through purgeProxy, and Varnish reaches the gateway
// through originProxy, so a test can cut or slow either.
type edge struct {
	gw                      *gatewaytest.Process
	bin                     string
	env                     map[string]string
	varnish                 string // base URL
	varnishAddr             string
	purgeProxy, originProxy *faultproxy.Proxy
	owner, other            string // tokens: the listings' firm, another firm
	ownerKey, otherKey      string // the two firms' API keys
	firm                    int64
	client                  *http.Client
}

// startEdge starts the gateway, then Varnish, and returns once the
// purges made meanwhile are delivered.
func startEdge(t *testing.T) *edge {
	t.Helper()
	e := newEdge(t)
	e.startGateway(t)
	e.startVarnish(t)
	// Any purge the change feed sent as the gateway started, before
	// Varnish listened, failed and opened the queue's purge breaker (the
	// imported listings send none: they are first versions). Start once
	// they are delivered and the breaker is closed.
	deadline := time.Now().Add(20 * time.Second)
	for !e.purgesSettled(t) {
		if time.Now().After(deadline) {
			t.Fatal("the gateway's purges were not delivered within 20 s of Varnish's start")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return e
}

// newEdge builds the gateway and fills its store: two firms with a user
// each, and the first firm's listings 1 (active, "v0") and 2 (passive).
// Neither the gateway nor Varnish runs yet.
func newEdge(t *testing.T) *edge {
	t.Helper()
	if os.Getenv("GATEWAY_VARNISH") != "1" {
		t.Skip("SKIP: the Varnish test is opt-in; run it with GATEWAY_VARNISH=1 go test -count=1 -v ./deploy/cdn/")
	}
	if _, err := exec.LookPath("varnishd"); err != nil {
		t.Fatal("varnishd not installed (apt-get install varnish varnish-modules)")
	}
	bin, err := gatewaytest.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := &edge{client: &http.Client{Timeout: 10 * time.Second}}
	varnishAddr := gatewaytest.FreeAddr(t)
	e.varnish, e.varnishAddr = "http://"+varnishAddr, varnishAddr
	e.purgeProxy = faultproxy.New(t, varnishAddr)
	prefix := testenv.RandomName("cdn") + ":"
	env := map[string]string{
		"GATEWAY_DATA_DIR":           t.TempDir(),
		"GATEWAY_STORE_URL":          testenv.PostgresURL(t),
		"GATEWAY_REDIS_URL":          "redis://" + testenv.RedisAddr(t) + "/0",
		"GATEWAY_REDIS_PREFIX":       prefix,
		"GATEWAY_JWT_SECRET":         "varnish-test-secret-varnish-test-secret",
		"GATEWAY_CDN_MODE":           "true",
		"GATEWAY_CDN_S_MAXAGE":       "60s",
		"GATEWAY_CDN_PURGE_FORMAT":   "varnish-xkey",
		"GATEWAY_CDN_PURGE_URL":      "http://" + e.purgeProxy.Addr() + "/",
		"GATEWAY_CDN_PURGE_SYNC":     "true",
		"GATEWAY_CDN_PURGE_TIMEOUT":  "500ms",
		"GATEWAY_CDN_REPURGE_AFTER":  "1500ms",
		"GATEWAY_CDN_ORIGIN_SECRET":  originSecret,
		"GATEWAY_STORE_TIMEOUT":      "500ms",
		"GATEWAY_CACHE_TTL":          "1s",
		"GATEWAY_BREAKER_OPEN_FOR":   "1s",
		"GATEWAY_BREAKER_WINDOW":     "5s",
		"GATEWAY_LOGIN_IP_ATTEMPTS":  "100000",
		"GATEWAY_LOCAL_CACHE_BYTES":  "0",
		"GATEWAY_LOGIN_KEY_ATTEMPTS": "100000",
	}
	f := gatewaytest.Admin(t, bin, env, "", "firm", "add", "--name", "Edge Realty")
	e.firm = int64(f["firmId"].(float64))
	f2 := gatewaytest.Admin(t, bin, env, "", "firm", "add", "--name", "Other Realty")
	gatewaytest.Admin(t, bin, env, "", "user", "add", "--firm", fmt.Sprint(e.firm), "--email", "a@edge.example")
	gatewaytest.Admin(t, bin, env, "", "user", "add", "--firm", fmt.Sprint(int64(f2["firmId"].(float64))), "--email", "b@other.example")
	listings := fmt.Sprintf(`[{"id":1,"no":1,"firmId":%[1]d,"firmUserId":1,"title":"v0","categoryId":1,"location":{"cityId":34}},
		{"id":2,"no":2,"firmId":%[1]d,"firmUserId":1,"title":"passive","isActive":false,"categoryId":1,"location":{"cityId":34}}]`, e.firm)
	gatewaytest.Admin(t, bin, env, listings, "listing", "import", "-")
	e.bin, e.env = bin, env
	e.ownerKey, e.otherKey = f["apiKey"].(string), f2["apiKey"].(string)
	return e
}

// startGateway starts the gateway, the proxy in front of it that Varnish
// fetches through, and logs both users in.
func (e *edge) startGateway(t *testing.T) {
	t.Helper()
	e.gw = gatewaytest.Start(t, e.bin, e.env)
	e.originProxy = faultproxy.New(t, strings.TrimPrefix(e.gw.Base, "http://"))
	e.owner = e.token(t, e.ownerKey, "a@edge.example")
	e.other = e.token(t, e.otherKey, "b@other.example")
}

// purgesSettled reports whether the gateway has no purge waiting and its
// purge breakers are closed.
func (e *edge) purgesSettled(t *testing.T) bool {
	t.Helper()
	return e.hasMetrics(t, "gateway_purges_pending 0", `gateway_breaker_state{breaker="purge"} 0`,
		`gateway_breaker_state{breaker="purge-sync"} 0`)
}

// hasMetrics reports whether the gateway's /metrics has every one of lines.
func (e *edge) hasMetrics(t *testing.T, lines ...string) bool {
	t.Helper()
	resp, err := http.Get(e.gw.AdminBase + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return false
	}
	have := map[string]bool{}
	for line := range strings.Lines(string(b)) {
		have[strings.TrimSpace(line)] = true
	}
	for _, l := range lines {
		if !have[l] {
			return false
		}
	}
	return true
}

func (e *edge) token(t *testing.T, key, email string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.gw.Base+"/auth/login", strings.NewReader(fmt.Sprintf(`{"email":%q,"key":%q}`, email, key)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "varnish-test")
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ JWTToken string }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.JWTToken == "" {
		t.Fatalf("login %s: %d %v", email, resp.StatusCode, err)
	}
	return out.JWTToken
}

// startVarnish runs varnishd on e.varnishAddr with the shipped VCL, its
// backend pointed at the origin proxy and its origin secret set.
func (e *edge) startVarnish(t *testing.T) {
	t.Helper()
	addr := e.varnishAddr
	vcl, err := os.ReadFile("varnish.vcl")
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(e.originProxy.Addr())
	src := strings.Replace(string(vcl), `.port = "8080";`, `.port = "`+port+`";`, 1)
	src = strings.Replace(src, `.host = "127.0.0.1";`, `.host = "`+host+`";`, 1)
	src = strings.Replace(src, "CHANGE-ME-origin-secret-of-at-least-32-bytes", originSecret, 1)
	// varnishd reads the VCL as its own unprivileged user: not in a
	// directory only root may enter, as t.TempDir's are.
	dir, err := os.MkdirTemp("", "varnish-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "test.vcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("varnishd", "-F", "-a", addr, "-f", path, "-n", filepath.Join(dir, "n"), "-s", "malloc,32m",
		"-p", "default_grace=0s")
	logPath := filepath.Join(dir, "varnishd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	log := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("varnishd:\n%s", log())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if resp, err := http.Get(e.varnish + "/realty/1"); err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable { // the probe has marked the gateway healthy
				return
			}
		}
		if time.Now().After(deadline) {
			resp, err := http.Get(e.varnish + "/realty/1")
			if err == nil {
				resp.Body.Close()
			}
			t.Fatalf("varnishd did not serve on %s (%v %v)", addr, resp, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type answer struct {
	status      int
	title       string
	cacheStatus string
	control     string
	cdnControl  string // CDN-Cache-Control, which must not reach a client
	age         string
}

// get reads a listing through Varnish (token may be empty).
func (e *edge) get(t *testing.T, path, token string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.varnish+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("GET %s through Varnish: %v", path, err)
	}
	defer resp.Body.Close()
	var l struct{ Title string }
	_ = json.NewDecoder(resp.Body).Decode(&l)
	return answer{status: resp.StatusCode, title: l.Title, cacheStatus: resp.Header.Get("Cache-Status"),
		control: resp.Header.Get("Cache-Control"), cdnControl: resp.Header.Get("CDN-Cache-Control"), age: resp.Header.Get("Age")}
}

// put updates listing 1 on the gateway directly; it returns when the write
// (and, with sync purges, its hard purge) is done.
func (e *edge) put(t *testing.T, title string, active bool) time.Duration {
	t.Helper()
	return e.putOn(t, e.gw.Base, title, active)
}

func (e *edge) putOn(t *testing.T, base, title string, active bool) time.Duration {
	t.Helper()
	began := time.Now()
	body := fmt.Sprintf(`{"title":%q,"categoryId":1,"location":{"cityId":34},"isActive":%v}`, title, active)
	req, _ := http.NewRequest(http.MethodPut, base+"/realty/1", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.owner)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT %s: %d", title, resp.StatusCode)
	}
	return time.Since(began)
}

func TestVarnish(t *testing.T) {
	e := startEdge(t)

	t.Run("1 hits are shared", func(t *testing.T) {
		first := e.get(t, "/realty/1", e.owner)
		second := e.get(t, "/realty/1", e.other)
		third := e.get(t, "/realty/1?utm=x", "")
		if first.status != 200 || second.status != 200 || third.status != 200 {
			t.Fatalf("statuses %d %d %d", first.status, second.status, third.status)
		}
		for _, a := range []answer{second, third} {
			if !strings.Contains(a.cacheStatus, "varnish; hit") {
				t.Fatalf("Cache-Status %q: another user's (or no) token, a query string: want a Varnish hit", a.cacheStatus)
			}
		}
	})

	t.Run("2 synchronous purge: no old read after a write", func(t *testing.T) {
		old := 0
		var sync []time.Duration
		for v := 1; v <= 200; v++ {
			e.get(t, "/realty/1", "") // Varnish holds the current version
			want := fmt.Sprintf("v%d", v)
			sync = append(sync, e.put(t, want, true))
			if got := e.get(t, "/realty/1", e.other); got.title != want {
				old++
				t.Errorf("GET right after the write of %s: %q (%s)", want, got.title, got.cacheStatus)
			}
		}
		if old > 0 {
			t.Fatalf("%d of 200 reads after a write were old", old)
		}
		// The cost: the same writes on a gateway that queues its purges.
		env := maps.Clone(e.env)
		env["GATEWAY_CDN_PURGE_SYNC"] = "false"
		queued := gatewaytest.Start(t, e.bin, env)
		var async []time.Duration
		for v := 1; v <= 200; v++ {
			e.get(t, "/realty/1", "")
			async = append(async, e.putOn(t, queued.Base, fmt.Sprintf("q%d", v), true))
		}
		t.Logf("PUT latency with a synchronous purge: p50 %v, p99 %v; with queued purges: p50 %v, p99 %v (200 writes each)",
			quantile(sync, 50), quantile(sync, 99), quantile(async, 50), quantile(async, 99))
		e.put(t, "v200", true)
		e.get(t, "/realty/1", "")
		e.put(t, "hidden", false)
		if got := e.get(t, "/realty/1", e.other); got.status != http.StatusNotFound {
			t.Fatalf("deactivated listing, next request by another firm: %d %q (%s)", got.status, got.title, got.cacheStatus)
		}
		if got := e.get(t, "/realty/1", e.owner); got.status != 200 || got.title != "hidden" {
			t.Fatalf("deactivated listing, its owner: %d %q", got.status, got.title)
		}
		e.put(t, "back", true)
	})

	t.Run("3 a purge queued while the CDN was unreachable is delivered within 5s of its return", func(t *testing.T) {
		e.get(t, "/realty/1", "")
		e.purgeProxy.Stop()
		e.put(t, "during-outage", true)
		if got := e.get(t, "/realty/1", ""); got.title == "during-outage" {
			t.Log("NOTE: Varnish had no copy; the outage did not keep one")
		}
		if err := e.purgeProxy.Restart(); err != nil {
			t.Fatal(err)
		}
		back := time.Now()
		for e.get(t, "/realty/1", "").title != "during-outage" {
			if time.Since(back) > 5*time.Second {
				t.Fatal("the queued purge was not delivered within 5s of the CDN's return")
			}
			time.Sleep(100 * time.Millisecond)
		}
		if s := e.gw.Stats(t); s.Purges.Failed == 0 || s.Purges.Dropped != 0 {
			t.Fatalf("purges %+v: want failed attempts during the outage and none given up", s.Purges)
		}
	})

	t.Run("4 a fetch in flight during a write is purged by the repeat", func(t *testing.T) {
		e.put(t, "before-fetch", true) // Varnish holds nothing for listing 1 now
		e.originProxy.SetLatency(time.Second)
		var wg sync.WaitGroup
		var inFlight answer
		wg.Go(func() { inFlight = e.get(t, "/realty/1", "") })
		time.Sleep(300 * time.Millisecond)
		e.originProxy.SetLatency(0)
		e.put(t, "after-fetch", true) // its purge matches nothing yet
		wg.Wait()
		if inFlight.title != "before-fetch" {
			t.Logf("NOTE: the slow fetch returned %q; the race did not happen", inFlight.title)
		}
		deadline := time.Now().Add(5 * time.Second)
		for e.get(t, "/realty/1", "").title != "after-fetch" {
			if time.Now().After(deadline) {
				t.Fatal("the old version fetched during the write stayed in Varnish: no repeat purge")
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("5 a stale answer is not stored as fresh", func(t *testing.T) {
		e.get(t, "/realty/1", "")
		e.put(t, "before-store-down", true) // the gateway's cache holds it, fresh for 1s
		time.Sleep(1100 * time.Millisecond)
		stop := stopStore(t, e)
		got := e.get(t, "/realty/1", "")
		stop()
		if got.status != 200 || !strings.Contains(got.cacheStatus, "stale-if-error") {
			t.Fatalf("with the store down: %d %q; want the gateway's stale copy", got.status, got.cacheStatus)
		}
		if got.control != "public, max-age=0, must-revalidate" || got.cdnControl != "" || got.age == "" {
			t.Fatalf("stale answer Cache-Control %q, CDN-Cache-Control %q, Age %q: want nothing a browser could serve stale, "+
				"no edge rules past the edge, and an Age", got.control, got.cdnControl, got.age)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			a := e.get(t, "/realty/1", "")
			if !strings.Contains(a.cacheStatus, "stale-if-error") && a.title == "before-store-down" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Varnish kept the stale answer after the store came back: %q", a.cacheStatus)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	t.Run("6 the origin secret reads active listings and nothing else", func(t *testing.T) {
		if got := e.get(t, "/realty/1", ""); got.status != 200 {
			t.Fatalf("active listing without a token through Varnish: %d", got.status)
		}
		if got := e.get(t, "/realty/2", ""); got.status != http.StatusNotFound {
			t.Fatalf("passive listing without a token through Varnish: %d, want 404", got.status)
		}
		if got := e.get(t, "/realty/2", e.owner); got.status != 200 || got.title != "passive" {
			t.Fatalf("passive listing with its owner's token through Varnish: %d %q", got.status, got.title)
		}
		req, _ := http.NewRequest(http.MethodGet, e.gw.Base+"/realty/1", nil)
		req.Header.Set("X-Origin-Auth", originSecret+"x")
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a wrong origin secret: %d, want 401", resp.StatusCode)
		}
	})

	t.Run("7 compressed listings: gzip stored, every variant new after a write", func(t *testing.T) {
		e.put(t, "compressed-1", true)
		raw := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableCompression: true}}
		defer raw.CloseIdleConnections()
		read := func(ae string) (body []byte, h http.Header) {
			t.Helper()
			req, _ := http.NewRequest(http.MethodGet, e.varnish+"/realty/1", nil)
			if ae != "" {
				req.Header.Set("Accept-Encoding", ae)
			}
			resp, err := raw.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("GET through Varnish, Accept-Encoding %q: %d %v", ae, resp.StatusCode, err)
			}
			if resp.Header.Get("Content-Encoding") == "gzip" {
				zr, err := gzip.NewReader(bytes.NewReader(b))
				if err != nil {
					t.Fatal(err)
				}
				if b, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
			}
			return b, resp.Header
		}
		for _, title := range []string{"compressed-1", "compressed-2"} {
			if title != "compressed-1" {
				e.put(t, title, true)
			}
			var bodies [][]byte
			for _, ae := range []string{"gzip", "", "gzip, deflate, br, zstd", "br", "gzip"} {
				body, h := read(ae)
				wantCE := ""
				if strings.Contains(ae, "gzip") {
					wantCE = "gzip"
				}
				if h.Get("Content-Encoding") != wantCE {
					t.Fatalf("Accept-Encoding %q: Content-Encoding %q, want %q (Varnish stores gzip)", ae, h.Get("Content-Encoding"), wantCE)
				}
				if !strings.Contains(string(body), `"title":"`+title+`"`) {
					t.Fatalf("Accept-Encoding %q after the write of %s: %s (%s)", ae, title, body, h.Get("Cache-Status"))
				}
				if cc := h.Get("Cache-Control"); strings.Contains(cc, "stale") || strings.Contains(cc, "s-maxage") || h.Get("CDN-Cache-Control") != "" {
					t.Fatalf("a browser got Cache-Control %q, CDN-Cache-Control %q", cc, h.Get("CDN-Cache-Control"))
				}
				bodies = append(bodies, body)
			}
			for _, b := range bodies[1:] {
				if !bytes.Equal(b, bodies[0]) {
					t.Fatal("the variants do not decode to the same listing")
				}
			}
			// Varnish stores the gzip variant: a read right after a fetch is
			// its own copy. The re-purge of an earlier write
			// (GATEWAY_CDN_REPURGE_AFTER) may drop that copy once between
			// two reads, so a miss is followed by a read that must hit.
			for try := 1; ; try++ {
				_, h := read("gzip")
				if strings.Contains(h.Get("Cache-Status"), "varnish; hit") {
					break
				}
				if try == 3 {
					t.Fatalf("gzip read %d times: Cache-Status %q; want a Varnish hit", try, h.Get("Cache-Status"))
				}
			}
		}
	})

	// Last: it revokes the owner's token.
	t.Run("8 a revoked token reads no passive listing through Varnish", func(t *testing.T) {
		if got := e.get(t, "/realty/2", e.owner); got.status != 200 || got.control != "private, no-cache" {
			t.Fatalf("passive listing with its owner's token through Varnish: %d %q; want 200, private", got.status, got.control)
		}
		out := gatewaytest.Admin(t, e.bin, e.env, "", "token", "revoke", "--firm", fmt.Sprint(e.firm), "--email", "a@edge.example")
		revoked := time.Now()
		if out["announced"] != true {
			t.Fatalf("token revoke printed %v; want it announced", out)
		}
		for {
			got := e.get(t, "/realty/2", e.owner)
			if got.status == http.StatusUnauthorized {
				t.Logf("the revoked token got 401 for the passive listing through Varnish %v after the revocation",
					time.Since(revoked).Round(time.Millisecond))
				break
			}
			if time.Since(revoked) > time.Second {
				t.Fatalf("passive listing with the revoked token through Varnish: %d %q; want 401 within 1s", got.status, got.title)
			}
			time.Sleep(20 * time.Millisecond)
		}
		// Active listings are public in CDN mode: Varnish serves its copy to
		// any request, with a revoked token or none. The re-purge of an
		// earlier subtest's write (GATEWAY_CDN_REPURGE_AFTER) may drop that
		// copy at any moment, and a miss forwards the revoked token: so a
		// read without a token puts the copy back first, and a miss that
		// met such a re-purge is tried again.
		for try := 1; ; try++ {
			e.get(t, "/realty/1", "")
			got := e.get(t, "/realty/1", e.owner)
			if got.status == 200 {
				break
			}
			if try == 3 || !strings.Contains(got.cacheStatus, "fwd=miss") {
				t.Fatalf("active listing with the revoked token through Varnish: %d (%s); want Varnish's public copy", got.status, got.cacheStatus)
			}
		}
		fresh := e.token(t, e.ownerKey, "a@edge.example")
		if got := e.get(t, "/realty/2", fresh); got.status != 200 || got.title != "passive" {
			t.Fatalf("passive listing with a token issued after the revocation: %d %q", got.status, got.title)
		}
	})
}

// TestVarnishStartedAfterTheGateway: a gateway started before the CDN in
// front of it, as in a roll-out that starts both together. The change
// feed's purges fail until the CDN answers and open the breaker in front
// of the queue; the first write once the CDN answers is still purged
// synchronously, and the very next read through Varnish is new. (With one
// breaker for both, the replay's failures refused the write's purge, and
// Varnish served the old listing until the repeat purge.)
func TestVarnishStartedAfterTheGateway(t *testing.T) {
	e := newEdge(t)
	e.purgeProxy.Stop() // the CDN's purge API does not answer yet
	db, err := pgx.Connect(context.Background(), e.env["GATEWAY_STORE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	run := func(stmt string) {
		t.Helper()
		tag, err := db.Exec(context.Background(), stmt)
		if err != nil || tag.RowsAffected() == 0 {
			t.Fatalf("%s: %v, %d rows", stmt, err, tag.RowsAffected())
		}
	}
	// Work for the feed, made by another writer: listing 2 edited in SQL.
	// Listing 1's import is settled, so that nothing but the write's own
	// purge can drop Varnish's copy of it.
	run(`UPDATE listings SET document = replace(document, '"title":"passive"', '"title":"passive, edited"') WHERE id = 2`)
	run(`UPDATE listing_changes SET applied_at = changed_at, done_at = changed_at WHERE listing_id = 1`)

	started := time.Now()
	e.startGateway(t)
	e.startVarnish(t) // it serves: a read stores listing 1 in it
	if got := e.get(t, "/realty/1", ""); got.status != 200 || got.title != "v0" {
		t.Fatalf("listing 1 through Varnish: %d %q", got.status, got.title)
	}
	if got := e.get(t, "/realty/1", ""); !strings.Contains(got.cacheStatus, "varnish; hit") {
		t.Fatalf("Cache-Status %q; want Varnish to hold listing 1", got.cacheStatus)
	}
	time.Sleep(time.Until(started.Add(2 * time.Second)))
	// The CDN answers at the start of an open period of the queue's
	// breaker, which the feed's failing purges reopen each second.
	open := `gateway_breaker_state{breaker="purge"} 2`
	deadline := time.Now().Add(20 * time.Second)
	for wasOpen := true; ; { // an edge: a reading not open, then open
		isOpen := e.hasMetrics(t, open)
		if isOpen && !wasOpen {
			break
		}
		wasOpen = isOpen
		if time.Now().After(deadline) {
			t.Fatal("the feed's purges did not open the queue's breaker within 20 s: no background failures to test against")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := e.purgeProxy.Restart(); err != nil {
		t.Fatal(err)
	}
	e.put(t, "first-write", true)
	if got := e.get(t, "/realty/1", ""); got.title != "first-write" {
		t.Fatalf("the first read through Varnish after the write: %q (%s); want the write's version: its purge was refused",
			got.title, got.cacheStatus)
	}
	if !e.hasMetrics(t, `gateway_breaker_state{breaker="purge-sync"} 0`) {
		t.Fatal("the writes' purge breaker is not closed")
	}
	// The feed's purges are delivered too, soon after.
	deadline = time.Now().Add(20 * time.Second)
	for !e.purgesSettled(t) {
		if time.Now().After(deadline) {
			t.Fatal("the feed's purges were not delivered within 20 s of the CDN's return")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func quantile(ds []time.Duration, q int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)*q/100].Round(10 * time.Microsecond)
}

// stopStore makes the gateway's store fail (a closed database) and returns
// how to undo it.
func stopStore(t *testing.T, e *edge) func() {
	t.Helper()
	u, err := url.Parse(e.gw.Env["GATEWAY_STORE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	admin := os.Getenv("GATEWAY_TEST_POSTGRES_URL")
	if admin == "" {
		admin = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	exec1 := func(sql string) {
		if out, err := exec.Command("psql", admin, "-qtAc", sql).CombinedOutput(); err != nil {
			t.Fatalf("psql %s: %v\n%s", sql, err, out)
		}
	}
	exec1("ALTER DATABASE " + db + " WITH ALLOW_CONNECTIONS false")
	exec1("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '" + db + "'")
	return func() { exec1("ALTER DATABASE " + db + " WITH ALLOW_CONNECTIONS true") }
}
