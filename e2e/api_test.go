package e2e

// The public API end to end: logins, both view forms and the rejections;
// the store and Redis going away and coming back, and /readyz with them;
// imports; and two processes serving one store coherently.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/faultproxy"
	"github.com/realty-gateway/gateway/internal/testenv"
)

func TestEndToEndLoginAndBothViewForms(t *testing.T) {
	e, prefix := postgresEnv(t, testenv.PostgresURL(t), testenv.RedisAddr(t))
	w := newWorld(t, e)
	coldCache(t, prefix)
	p := start(t, e)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer rdb.Close()

	for _, body := range []string{w.passwordLogin(), w.otpLogin()} {
		tok := p.token(t, body)
		if strings.Count(tok, ".") != 2 {
			t.Fatalf("token %q is not a JWS", tok)
		}
	}
	tok := p.token(t, w.passwordLogin())

	first := p.view(t, "/realty/1001", tok)
	if first.status != 200 || first.header.Get("X-Cache") != "MISS" {
		t.Fatalf("first view: %d %s %s", first.status, first.header.Get("X-Cache"), first.body)
	}
	ctx := context.Background()
	listingNo := fmt.Sprintf("%d-7", w.firm)
	for _, key := range []string{prefix + "realty:id:1001", prefix + "realty:listing:" + listingNo} {
		if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 1 {
			t.Fatalf("Redis key %s missing after one miss (err %v)", key, err)
		}
	}
	loads := p.Stats(t).Cache.StoreLoads
	second := p.view(t, "/realty/"+listingNo, tok)
	if second.status != 200 || second.header.Get("X-Cache") != "HIT" || !bytes.Equal(first.body, second.body) {
		t.Fatalf("second view by number: %d %s", second.status, second.header.Get("X-Cache"))
	}
	if got := p.Stats(t).Cache.StoreLoads; got != loads {
		t.Fatalf("store loads went from %d to %d on a cached read", loads, got)
	}

	var doc map[string]any
	if err := json.Unmarshal(first.body, &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"id": 1001.0, "listingId": listingNo, "no": 7.0, "firmId": float64(w.firm), "firmUserId": float64(w.pwUser),
		"createdDate": 1700000000000.0, "updatedDate": 1700000100000.0, "endDate": nil, "isActive": true, "note": nil,
	}
	for k, v := range want {
		if doc[k] != v {
			t.Errorf("%s = %v, want %v", k, doc[k], v)
		}
	}
	loc := doc["location"].(map[string]any)
	if loc["latitude"] != 41.01 || loc["longitude"] != 28.97 || loc["nearLocation"] != true || loc["countyId"] != nil {
		t.Errorf("location = %v", loc)
	}
	for _, k := range []string{"latitude", "longitude", "nearLocation"} {
		if _, ok := doc[k]; ok {
			t.Errorf("%s at the top level", k)
		}
	}
	members := []string{"id", "listingId", "title", "firmId", "firmUserId", "no", "createdDate", "updatedDate", "endDate",
		"categoryId", "subCategoryId", "location", "realtyFiles", "note", "realtyDetailUrl", "isActive",
		"realtyIdentificationNo", "energyDocumentNo", "attributes"}
	for _, k := range members {
		if _, ok := doc[k]; !ok {
			t.Errorf("member %s missing", k)
		}
	}
	if len(doc) != len(members) {
		t.Errorf("listing has %d members, want %d", len(doc), len(members))
	}

	if r := p.view(t, fmt.Sprintf("/realty/%d-99", w.firm), tok); r.status != 404 {
		t.Fatalf("unknown listing number: %d", r.status)
	}
	passive := p.view(t, fmt.Sprintf("/realty/%d-%d", w.firm, passiveNo), tok)
	if passive.status != 200 || !bytes.Contains(passive.body, []byte(`"isActive":false`)) {
		t.Fatalf("own passive listing: %d %s", passive.status, passive.body)
	}
	otherTok := p.token(t, w.otherLogin())
	if r := p.view(t, fmt.Sprintf("/realty/%d-%d", w.firm, passiveNo), otherTok); r.status != 404 {
		t.Fatalf("other firm's passive listing: %d, want 404", r.status)
	}
	if r := p.view(t, "/realty/1001", otherTok); r.status != 200 {
		t.Fatalf("other firm's active listing: %d, want 200", r.status)
	}
	var empty map[string]any
	r := p.view(t, fmt.Sprintf("/realty/%d-99", w.firm), tok)
	_ = json.Unmarshal(r.body, &empty)
	if r.header.Get("Content-Type") != "application/problem+json" || empty["status"] != 404.0 {
		t.Fatalf("404 body: %s %s", r.header.Get("Content-Type"), r.body)
	}
}

func TestEndToEndRejections(t *testing.T) {
	e, _ := postgresEnv(t, testenv.PostgresURL(t), testenv.RedisAddr(t))
	w := newWorld(t, e)
	p := start(t, e)
	tok := p.token(t, w.passwordLogin())

	logins := []struct {
		name   string
		header map[string]string
		give   string
		want   int
	}{
		{name: "malformed JSON", give: `{"email":`, want: 400},
		{name: "not an object", give: `[1,2]`, want: 400},
		{name: "email of wrong type", give: `{"email":5,"key":"k"}`, want: 400},
		{name: "missing email", give: fmt.Sprintf(`{"key":%q}`, w.key), want: 400},
		{name: "missing key", give: `{"email":"otp@acme.example"}`, want: 400},
		{name: "missing User-Agent", header: map[string]string{"User-Agent": "<none>"}, give: w.otpLogin(), want: 400},
		{name: "blank User-Agent", header: map[string]string{"User-Agent": "   "}, give: w.otpLogin(), want: 400},
		{name: "wrong content type", header: map[string]string{"Content-Type": "text/plain"}, give: w.otpLogin(), want: 415},
		{name: "unknown e-mail", give: fmt.Sprintf(`{"email":"nobody@acme.example","password":"x","key":%q}`, w.key), want: 401},
		{name: "wrong key", give: fmt.Sprintf(`{"email":"agent@acme.example","password":%q,"key":"rk_wrong"}`, w.password), want: 401},
		{name: "wrong password", give: fmt.Sprintf(`{"email":"agent@acme.example","password":"nope","key":%q}`, w.key), want: 401},
		{name: "required password missing", give: fmt.Sprintf(`{"email":"agent@acme.example","key":%q}`, w.key), want: 401},
		{name: "password sent by passwordless account", give: fmt.Sprintf(`{"email":"otp@acme.example","password":"x","key":%q}`, w.key), want: 401},
		{name: "e-mail of another firm", give: fmt.Sprintf(`{"email":"agent@other.example","password":%q,"key":%q}`, w.password, w.key), want: 401},
	}
	var unauthorized []byte
	for _, tt := range logins {
		t.Run("login/"+tt.name, func(t *testing.T) {
			h := map[string]string{"Content-Type": "application/json"}
			for k, v := range tt.header {
				h[k] = v
			}
			r := p.request(t, http.MethodPost, "/auth/login", h, tt.give)
			if r.status != tt.want || r.header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("status %d (%s), want %d problem+json: %s", r.status, r.header.Get("Content-Type"), tt.want, r.body)
			}
			if tt.want == 401 {
				// requestId names the request, so it differs by design.
				body := requestIDMember.ReplaceAll(r.body, nil)
				if unauthorized != nil && !bytes.Equal(unauthorized, body) {
					t.Fatalf("401 bodies differ:\n%s\n%s", unauthorized, body)
				}
				unauthorized = body
			}
		})
	}

	t.Run("login/body too large", func(t *testing.T) {
		// Only the head is sent: the gateway refuses on Content-Length
		// before it reads a body, so the answer cannot race a client still
		// writing into a socket the gateway has closed (Expect:
		// 100-continue did: fasthttp sends 100 Continue before it checks
		// the length).
		for range 20 {
			conn, err := net.DialTimeout("tcp", strings.TrimPrefix(p.Base, "http://"), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			conn.SetDeadline(time.Now().Add(testenv.Patience()))
			fmt.Fprint(conn, "POST /auth/login HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"+
				"User-Agent: e2e-test\r\nContent-Length: 70000\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				conn.Close()
				t.Fatal(err)
			}
			resp.Body.Close()
			conn.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("status %d (%s), want 413 problem+json", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
		}
	})

	views := []struct {
		name string
		path string
		auth string
		want int
	}{
		{name: "missing token", path: "/realty/1001", auth: "<none>", want: 401},
		{name: "garbage token", path: "/realty/1001", auth: "Bearer abc.def.ghi", want: 401},
		{name: "altered token", path: "/realty/1001", auth: "Bearer " + tok[:len(tok)-4] + "AAAA", want: 401},
		{name: "token checked before path", path: "/realty/007", auth: "<none>", want: 401},
		{name: "malformed path", path: "/realty/007", auth: "Bearer " + tok, want: 400},
		{name: "zero id", path: "/realty/0", auth: "Bearer " + tok, want: 400},
		{name: "unknown id", path: "/realty/424242", auth: "Bearer " + tok, want: 404},
	}
	for _, tt := range views {
		t.Run("view/"+tt.name, func(t *testing.T) {
			r := p.request(t, http.MethodGet, tt.path, map[string]string{"Authorization": tt.auth}, "")
			if r.status != tt.want || r.header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("status %d, want %d: %s", r.status, tt.want, r.body)
			}
			if tt.want == 401 && !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("WWW-Authenticate = %q", r.header.Get("WWW-Authenticate"))
			}
		})
	}

	t.Run("header over the limit", func(t *testing.T) {
		// The gateway answers 431 and closes; the kernel may reset the
		// connection before the client reads the answer, so a reset is a
		// refusal too, but never anything else, and 431 must be seen.
		saw431 := false
		for range 5 {
			req, _ := http.NewRequest(http.MethodGet, p.Base+"/realty/1001", nil)
			req.Header.Set("Authorization", "Bearer "+strings.Repeat(".", 16<<10))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				continue
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Fatalf("status %d, want 431", resp.StatusCode)
			}
			saw431 = true
		}
		if !saw431 {
			t.Fatal("no 431 in five tries")
		}
	})
	t.Run("1 MB of dots", func(t *testing.T) {
		// The gateway stops reading at its header limit: a 431 or a closed
		// connection, and it goes on serving.
		req, _ := http.NewRequest(http.MethodGet, p.Base+"/realty/1001", nil)
		req.Header.Set("Authorization", "Bearer "+strings.Repeat(".", 1<<20))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Fatalf("status %d, want 431", resp.StatusCode)
			}
		}
		if r := p.view(t, "/realty/1001", tok); r.status != 200 {
			t.Fatalf("after the huge header: %d", r.status)
		}
	})
}

func TestEndToEndOneStoreCallForConcurrentMisses(t *testing.T) {
	e, prefix := postgresEnv(t, testenv.PostgresURL(t), testenv.RedisAddr(t))
	w := newWorld(t, e)
	coldCache(t, prefix)
	p := start(t, e)
	tok := p.token(t, w.otpLogin())
	// Until the change feed has vouched for Redis, a read never joins a
	// load under way (see cache/trust.go); this is about the steady state.
	testenv.WaitFor(t, func() bool { s, err := p.ReadStats(); return err == nil && s.Cache.RedisTrusted })
	before := p.Stats(t).Cache.StoreLoads

	var wg sync.WaitGroup
	statuses := make(chan int, 100)
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, p.Base+"/realty/1001", nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != 200 {
			t.Fatalf("status %d", s)
		}
	}
	if got := p.Stats(t).Cache.StoreLoads - before; got != 1 {
		t.Fatalf("store loads for 100 concurrent misses = %d, want 1", got)
	}
}

func TestEndToEndStaleOr503WhileStoreIsDown(t *testing.T) {
	pgURL := testenv.PostgresURL(t)
	e, prefix := postgresEnv(t, pgURL, testenv.RedisAddr(t))
	w := newWorld(t, e)
	coldCache(t, prefix)

	pgProxy := faultproxy.New(t, "127.0.0.1:5432")
	e["GATEWAY_STORE_URL"] = strings.Replace(pgURL, "127.0.0.1:5432", pgProxy.Addr(), 1)
	e["GATEWAY_CACHE_TTL"] = "1s"
	e["GATEWAY_BREAKER_OPEN_FOR"] = "1s"
	e["GATEWAY_BREAKER_MIN_REQUESTS"] = "3"
	e["GATEWAY_STORE_TIMEOUT"] = "500ms"
	p := start(t, e)
	tok := p.token(t, w.otpLogin())
	warm := p.view(t, "/realty/1001", tok)
	if warm.status != 200 {
		t.Fatalf("warm-up: %d", warm.status)
	}

	pgProxy.Stop()
	time.Sleep(1100 * time.Millisecond) // let the cached copy pass its 1s freshness
	stale := p.view(t, fmt.Sprintf("/realty/%d-7", w.firm), tok)
	if stale.status != 200 || stale.header.Get("X-Cache") != "STALE" || !bytes.Equal(stale.body, warm.body) {
		t.Fatalf("cached listing with the store down: %d %s %s", stale.status, stale.header.Get("X-Cache"), stale.body)
	}
	for range 5 {
		r := p.view(t, fmt.Sprintf("/realty/%d-%d", w.firm, thirdNo), tok)
		if r.status != 503 || r.header.Get("Retry-After") == "" || r.header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("uncached listing with the store down: %d Retry-After=%q %s", r.status, r.header.Get("Retry-After"), r.body)
		}
	}
	if r := p.login(t, w.otpLogin()); r.status != 503 {
		t.Fatalf("login with the store down: %d %s", r.status, r.body)
	}

	if err := pgProxy.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(testenv.Patience())
	for {
		r := p.view(t, fmt.Sprintf("/realty/%d-%d", w.firm, thirdNo), tok)
		if r.status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery after the store came back: %d %s", r.status, r.body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestEndToEndReadyzFlips: /readyz stays 204 while only the store is down
// (the cache serves), turns 503 when Redis goes too, stays 503 past the
// breaker's open period although no request comes, and turns 204 again
// when both are back.
func TestEndToEndReadyzFlips(t *testing.T) {
	pgURL := testenv.PostgresURL(t)
	e, _ := postgresEnv(t, pgURL, testenv.RedisAddr(t))
	w := newWorld(t, e)
	pgProxy := faultproxy.New(t, "127.0.0.1:5432")
	redisProxy := faultproxy.New(t, testenv.RedisAddr(t))
	e["GATEWAY_STORE_URL"] = strings.Replace(pgURL, "127.0.0.1:5432", pgProxy.Addr(), 1)
	e["GATEWAY_REDIS_URL"] = "redis://" + redisProxy.Addr() + "/0"
	e["GATEWAY_BREAKER_OPEN_FOR"] = "1s"
	e["GATEWAY_BREAKER_MIN_REQUESTS"] = "3"
	e["GATEWAY_STORE_TIMEOUT"] = "300ms"
	p := start(t, e)
	tok := p.token(t, w.otpLogin())
	ready := func() int { return p.adminStatus(t, "/readyz") }
	readyGauge := func() float64 {
		v, ok := p.metric(t, "gateway_ready")
		if !ok {
			t.Fatal("/metrics has no gateway_ready")
		}
		return v
	}
	if got, gauge := ready(), readyGauge(); got != http.StatusNoContent || gauge != 1 {
		t.Fatalf("/readyz with everything up: %d, gateway_ready %v", got, gauge)
	}

	pgProxy.Stop()
	for i := range 6 { // misses open the store's breaker
		p.view(t, fmt.Sprintf("/realty/%d-%d", w.firm, 100+i), tok)
	}
	if got := ready(); got != http.StatusNoContent {
		t.Fatalf("/readyz with only the store down: %d, want 204 (the cache serves)", got)
	}
	redisProxy.Stop()
	if got := ready(); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with the store and Redis down: %d, want 503", got)
	}
	time.Sleep(1500 * time.Millisecond) // the breaker turns half-open on its own
	if got, gauge := ready(), readyGauge(); got != http.StatusServiceUnavailable || gauge != 0 {
		t.Fatalf("/readyz past the breaker's open period, no traffic: %d, want 503; gateway_ready %v, want 0", got, gauge)
	}

	if err := pgProxy.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := redisProxy.Restart(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, func() bool { return ready() == http.StatusNoContent && readyGauge() == 1 })
}

func TestEndToEndReadsWhileRedisIsStopped(t *testing.T) {
	e, prefix := postgresEnv(t, testenv.PostgresURL(t), testenv.RedisAddr(t))
	w := newWorld(t, e)
	coldCache(t, prefix)
	redisProxy := faultproxy.New(t, testenv.RedisAddr(t))
	e["GATEWAY_REDIS_URL"] = "redis://" + redisProxy.Addr() + "/0"
	// Without the local tier, so that every read meets the stopped Redis;
	// the local tier's own outage rules are TestEndToEndLocalTier*'s.
	e["GATEWAY_LOCAL_CACHE_BYTES"] = "0"
	p := start(t, e)
	tok := p.token(t, w.otpLogin())
	if r := p.view(t, "/realty/1001", tok); r.status != 200 {
		t.Fatalf("warm-up: %d", r.status)
	}

	redisProxy.Stop()
	for _, path := range []string{"/realty/1001", fmt.Sprintf("/realty/%d-7", w.firm), fmt.Sprintf("/realty/%d-%d", w.firm, thirdNo)} {
		r := p.view(t, path, tok)
		if r.status != 200 || r.header.Get("X-Cache") != "MISS" {
			t.Fatalf("%s with Redis stopped: %d %s %s", path, r.status, r.header.Get("X-Cache"), r.body)
		}
	}

	if err := redisProxy.Restart(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer rdb.Close()
	deadline := time.Now().Add(testenv.Patience())
	for {
		r := p.view(t, "/realty/1001", tok)
		if r.status == 200 && r.header.Get("X-Cache") == "HIT" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cache hits did not come back with Redis: %d %s", r.status, r.header.Get("X-Cache"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n, _ := rdb.Exists(context.Background(), prefix+"realty:id:1001").Result(); n != 1 {
		t.Fatal("Redis key not written after Redis came back")
	}
}

func TestEndToEndEmbeddedSQLiteDefaults(t *testing.T) {
	dir := t.TempDir()
	e := environment{"GATEWAY_DATA_DIR": dir}
	p := start(t, e)
	var seed struct {
		APIKey   string `json:"apiKey"`
		Password string `json:"password"`
	}
	credsFile := filepath.Join(dir, "demo-credentials.json") // internal/demo: CredentialsFile
	b, err := os.ReadFile(credsFile)
	if err != nil || json.Unmarshal(b, &seed) != nil || seed.APIKey == "" || seed.Password == "" {
		t.Fatalf("no demo credentials in %s (%v): %s", credsFile, err, b)
	}
	if fi, err := os.Stat(credsFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("demo credentials file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	if strings.Contains(p.Logs(), seed.APIKey) || strings.Contains(p.Logs(), seed.Password) {
		t.Fatalf("the demo credentials reached the log:\n%s", p.Logs())
	}
	if !strings.Contains(p.Logs(), credsFile) {
		t.Errorf("the log does not say where the demo credentials are:\n%s", p.Logs())
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "gateway.db")); err != nil {
		t.Fatalf("embedded store not at data/gateway.db: %v", err)
	}
	tok := p.token(t, fmt.Sprintf(`{"email":"agent@demo.example","password":%q,"key":%q}`, seed.Password, seed.APIKey))
	p.token(t, fmt.Sprintf(`{"email":"otp@demo.example","key":%q}`, seed.APIKey))
	for _, path := range []string{"/realty/1", "/realty/1-1"} {
		if r := p.view(t, path, tok); r.status != 200 {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
	}

	// An import by another process takes effect at once.
	admin(t, e, `[{"id": 77, "firmId": 1, "firmUserId": 1, "title": "new", "categoryId": 1, "location": {"cityId": 6}}]`, "listing", "import", "-")
	if r := p.view(t, "/realty/77", tok); r.status != 200 {
		t.Fatalf("imported listing: %d %s", r.status, r.body)
	}

	if strings.Contains(p.Logs(), "e2e-secret") {
		t.Fatal("a secret reached the log")
	}
}

func TestEndToEndImport(t *testing.T) {
	e, _ := postgresEnv(t, testenv.PostgresURL(t), testenv.RedisAddr(t))
	w := newWorld(t, e)
	p := start(t, e)
	tok := p.token(t, w.otpLogin())

	// A cached "absent" must not hide a listing imported afterwards.
	for _, path := range []string{"/realty/2002", fmt.Sprintf("/realty/%d-50", w.firm)} {
		if r := p.view(t, path, tok); r.status != 404 {
			t.Fatalf("%s before the import: %d", path, r.status)
		}
	}
	admin(t, e, fmt.Sprintf(`[{"id": 2002, "no": 50, "firmId": %d, "firmUserId": %d, "title": "late", "categoryId": 1, "location": {"cityId": 6}}]`, w.firm, w.pwUser), "listing", "import", "-")
	for _, path := range []string{"/realty/2002", fmt.Sprintf("/realty/%d-50", w.firm)} {
		if r := p.view(t, path, tok); r.status != 200 {
			t.Fatalf("%s after the import: %d %s", path, r.status, r.body)
		}
	}

	tests := []struct {
		name       string
		give       string
		wantStderr string
	}{
		{name: "unknown firm", give: `[{"title":"ok","categoryId":1,"location":{"cityId":6},"firmId":%[1]d,"firmUserId":%[2]d},{"id":3003,"title":"x","categoryId":1,"location":{"cityId":6},"firmId":999,"firmUserId":%[2]d}]`, wantStderr: "entry 1 (id 3003)"},
		{name: "user of another firm", give: `[{"id":3004,"title":"x","categoryId":1,"location":{"cityId":6},"firmId":%[3]d,"firmUserId":%[2]d}]`, wantStderr: "entry 0 (id 3004)"},
		{name: "duplicate id", give: `[{"title":"ok","categoryId":1,"location":{"cityId":6},"firmId":%[1]d,"firmUserId":%[2]d},{"id":1001,"title":"x","categoryId":1,"location":{"cityId":6},"firmId":%[1]d,"firmUserId":%[2]d}]`, wantStderr: "entry 1 (id 1001)"},
		{name: "duplicate number", give: `[{"id":3005,"no":7,"title":"x","categoryId":1,"location":{"cityId":6},"firmId":%[1]d,"firmUserId":%[2]d}]`, wantStderr: "entry 0 (id 3005)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := gatewayCmdStderr(t, e, fmt.Sprintf(tt.give, w.firm, w.pwUser, w.firm2), "listing", "import", "-")
			if code == 0 {
				t.Fatalf("import succeeded: %s", stdout)
			}
			if !strings.Contains(stderr, tt.wantStderr) || stdout != "" {
				t.Fatalf("stderr %q, stdout %q; want %q named", stderr, stdout, tt.wantStderr)
			}
			// Nothing was written: the valid first entry, which would have
			// taken the firm's next number (1 and 2 were assigned, 7 and 50
			// given), did not land either.
			if r := p.view(t, fmt.Sprintf("/realty/%d-3", w.firm), tok); r.status != 404 {
				t.Fatalf("a rejected file wrote a listing: %d", r.status)
			}
		})
	}
}

// TestEndToEndTwoProcessCoherence: client A writes through process 1 while
// client B reads both forms through process 2 in a tight loop. No read
// sent after a write returned may show an older version.
func TestEndToEndTwoProcessCoherence(t *testing.T) {
	e, _ := postgresEnv(t, testenv.PostgresURL(t), testenv.RedisAddr(t))
	w := newWorld(t, e)
	e2 := environment{}
	for k, v := range e {
		e2[k] = v
	}
	writer, reader := start(t, e), start(t, e2)
	tokA, tokB := writer.token(t, w.passwordLogin()), reader.token(t, w.otpLogin())
	paths := []string{"/realty/1001", fmt.Sprintf("/realty/%d-7", w.firm)}
	for _, path := range paths { // both keys cached in the reader's view
		if r := reader.view(t, path, tokB); r.status != 200 {
			t.Fatalf("warm-up %s: %d", path, r.status)
		}
	}
	body := func(version int) string {
		return fmt.Sprintf(`{"title":"v%d","categoryId":2,"location":{"cityId":34}}`, version)
	}

	var committed atomic.Int64 // the last version whose PUT has returned
	done := make(chan struct{})
	type result struct{ reads, stale int }
	results := make(chan result)
	go func() {
		var res result
		// Each read in another coding: every variant of a version must be
		// as new as the identity body.
		client := &http.Client{Timeout: testenv.Patience(), Transport: &http.Transport{DisableCompression: true}}
		defer client.CloseIdleConnections()
		codings := []string{"", "gzip", "br", "zstd"}
		for i := 0; ; i++ {
			select {
			case <-done:
				results <- res
				return
			default:
			}
			floor := committed.Load()
			req, _ := http.NewRequest(http.MethodGet, reader.Base+paths[i%2], nil)
			req.Header.Set("Authorization", "Bearer "+tokB)
			if ae := codings[(i/2)%len(codings)]; ae != "" {
				req.Header.Set("Accept-Encoding", ae)
			}
			resp, err := client.Do(req)
			if err != nil {
				continue
			}
			raw, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				continue
			}
			var l struct{ Title string }
			if err := json.Unmarshal(decode(t, resp.Header.Get("Content-Encoding"), raw), &l); err != nil {
				t.Errorf("read %s (%s): %v", paths[i%2], resp.Header.Get("Content-Encoding"), err)
			}
			var seen int64
			fmt.Sscanf(l.Title, "v%d", &seen)
			res.reads++
			if l.Title != "Sea view" && seen < floor || l.Title == "Sea view" && floor > 0 {
				res.stale++
				t.Errorf("read %s after version %d returned shows %q", paths[i%2], floor, l.Title)
			}
		}
	}()
	for v := 1; v <= 40; v++ {
		r := writer.request(t, http.MethodPut, paths[v%2], map[string]string{
			"Authorization": "Bearer " + tokA, "Content-Type": "application/json"}, body(v))
		if r.status != 200 {
			t.Fatalf("PUT v%d: %d %s", v, r.status, r.body)
		}
		committed.Store(int64(v))
		time.Sleep(5 * time.Millisecond)
	}
	close(done)
	res := <-results
	if res.reads < 40 {
		t.Fatalf("only %d reads ran alongside 40 writes", res.reads)
	}
	t.Logf("%d reads alongside 40 writes, %d stale", res.reads, res.stale)
	// After the last write, every coding of both keys is new on both
	// processes.
	for _, p := range []*process{reader, writer} {
		for _, path := range paths {
			for _, ae := range []string{"identity", "gzip", "br", "zstd"} {
				req, _ := http.NewRequest(http.MethodGet, p.Base+path, nil)
				req.Header.Set("Authorization", "Bearer "+tokB)
				req.Header.Set("Accept-Encoding", ae)
				r := doRaw(t, req)
				if body := decode(t, r.header.Get("Content-Encoding"), r.body); !bytes.Contains(body, []byte(`"title":"v40"`)) {
					t.Fatalf("final read %s in %s: %s", path, ae, body)
				}
			}
		}
	}
	if r := writer.request(t, http.MethodDelete, paths[0], map[string]string{"Authorization": "Bearer " + tokA}, ""); r.status != 204 {
		t.Fatalf("DELETE: %d", r.status)
	}
	for _, path := range paths {
		if r := reader.view(t, path, tokB); r.status != 404 {
			t.Fatalf("read %s through the other process after DELETE: %d", path, r.status)
		}
	}
}
