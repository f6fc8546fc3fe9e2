package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // to mark the embedded store's feed done

	"github.com/realty-gateway/gateway/internal/testenv"
)

const jwtSecret = "bench-secret-bench-secret-bench-secret"

// server is one process under test.
type server struct {
	name string
	addr string
	// admin is a gateway's admin listener (/stats, /metrics); prefix its
	// Redis key prefix.
	admin, prefix string
	redisless     bool
	embedded      bool // on a SQLite store
	naive         bool // serve-naive-longtail: counts its Redis hits and misses on /_stats
	cmd           *exec.Cmd
	// auth: requests carry the JWT. path is what wrk asks for.
	auth bool
	path string
	// script is a wrk Lua script; empty means report.lua. headers are
	// more request header lines ("Name: value").
	script  string
	headers []string
	// next is where a walk of distinct listings (walk.lua) goes on.
	next int
	// oneThread: wrk drives it with one thread (-tokens' concurrent
	// pairs, two wrk at once).
	oneThread bool
}

// lab holds everything one run starts, so that stopAll can end it.
type lab struct {
	work, root string
	opts       options
	gateway    string // binary
	self       string // this program, for the baselines
	dbURL      string // the run's own PostgreSQL database
	dbName     string
	dropDB     func()
	redisAddr  string
	prefix     string
	apiKey     string
	// embeddedAPIKey is the bench firm's key in the embedded store.
	embeddedAPIKey string
	token          string
	body           []byte // the hot listing's response bytes
	servers        map[string]*server
	started        []*exec.Cmd
}

func (l *lab) prepare(ctx context.Context) error {
	l.servers = map[string]*server{}
	l.redisAddr = envOr("GATEWAY_TEST_REDIS_ADDR", "127.0.0.1:6379")
	l.prefix = "bench:" + randomHex(4) + ":"
	if err := l.build(ctx); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	l.self = self
	if err := l.createDatabase(ctx); err != nil {
		return err
	}
	if err := l.seed(ctx); err != nil {
		return err
	}
	switch {
	case l.opts.feed, l.opts.importBench, l.opts.soak: // they start their own gateways
		return nil
	case l.opts.cases:
		if err := l.startAll(ctx, false); err != nil {
			return err
		}
		return l.awaitFeedDrained(ctx, feedSettleWait)
	case l.opts.miss:
		if err := l.startMiss(ctx); err != nil {
			return err
		}
		return l.awaitFeedDrained(ctx, feedSettleWait)
	case l.opts.codings:
		return l.startCodings(ctx)
	case l.opts.tokens:
		return l.startTokens(ctx)
	}
	return nil
}

// build builds the gateway of the module at l.root (the working tree, or
// with -release an earlier commit's own tree) into the work directory.
func (l *lab) build(ctx context.Context) error {
	l.gateway = filepath.Join(l.work, "gateway")
	log.Printf("building the gateway in %s", l.root)
	build := exec.CommandContext(ctx, "go", "build", "-o", l.gateway, ".")
	build.Dir = l.root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build in %s: %w\n%s", l.root, err, out)
	}
	return nil
}

// createDatabase creates the run's database, or with -db finds or
// creates the one named, which the run keeps.
func (l *lab) createDatabase(ctx context.Context) error {
	admin := envOr("GATEWAY_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return fmt.Errorf("PostgreSQL: %w", err)
	}
	name := "bench_" + randomHex(4)
	exists := false
	if l.opts.db != "" {
		name = l.opts.db
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
			conn.Close(ctx)
			return err
		}
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			conn.Close(ctx)
			return fmt.Errorf("create database: %w", err)
		}
	}
	l.dropDB = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if l.opts.db == "" {
			_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		}
		_ = conn.Close(ctx)
	}
	cfg, err := pgx.ParseConfig(admin)
	if err != nil {
		return err
	}
	l.dbName = name
	l.dbURL = fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, name)
	return nil
}

// gatewayEnv is the environment of a gateway on the run's PostgreSQL and
// Redis.
func (l *lab) gatewayEnv(extra ...string) []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "GATEWAY_CONFIG=/dev/null",
		"GATEWAY_DATA_DIR=" + l.work, "GATEWAY_STORE_URL=" + l.dbURL,
		"GATEWAY_REDIS_URL=redis://" + l.redisAddr + "/0", "GATEWAY_REDIS_PREFIX=" + l.prefix,
		"GATEWAY_JWT_SECRET=" + jwtSecret, "GATEWAY_LOG_LEVEL=warn",
		"GATEWAY_LOGIN_IP_ATTEMPTS=1000000",
	}
	return append(env, extra...)
}

func (l *lab) admin(ctx context.Context, env []string, stdin io.Reader, args ...string) (map[string]any, error) {
	cmd := exec.CommandContext(ctx, l.gateway, args...)
	cmd.Env, cmd.Dir, cmd.Stdin = env, l.work, stdin
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("gateway %v: %w\n%s", args, err, ee.Stderr)
		}
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(out, &m)
}

// seed creates a firm and a passwordless user in PostgreSQL (a kept
// database has them: there the firm's key is rotated, since the key is
// not kept) and in the embedded SQLite store, and the listings: 1..n in
// PostgreSQL, as many as the parts need, the hot one (id 1) in SQLite too,
// with the same bytes.
func (l *lab) seed(ctx context.Context) error {
	seeded, err := l.pgSeeded(ctx)
	if err != nil {
		return err
	}
	for i, env := range [][]string{l.gatewayEnv(), l.embeddedEnv()} {
		if i == 0 && seeded {
			f, err := l.admin(ctx, env, nil, "firm", "rotate-key", "--firm", "1")
			if err != nil {
				return err
			}
			l.apiKey, _ = f["apiKey"].(string)
			if l.apiKey == "" {
				return fmt.Errorf("firm rotate-key printed %v", f)
			}
			continue
		}
		f, err := l.admin(ctx, env, nil, "firm", "add", "--name", "Bench Realty")
		if err != nil {
			return err
		}
		if _, err := l.admin(ctx, env, nil, "user", "add", "--firm", "1", "--email", "bench@bench.example"); err != nil {
			return err
		}
		if f["firmId"] != 1.0 {
			return fmt.Errorf("firm add printed %v, want firm 1", f)
		}
		if i == 0 { // the token of PostgreSQL's user is good on every gateway: one secret
			l.apiKey = f["apiKey"].(string)
		} else { // but for a gateway signing with a key of its own
			l.embeddedAPIKey, _ = f["apiKey"].(string)
		}
	}
	n := 0
	if l.opts.cases || l.opts.miss || l.opts.codings || l.opts.tokens || l.opts.feed || l.opts.release || l.opts.burst || l.opts.soak { // -release: its miss case; -burst: every run's; -soak: the load's
		n = l.opts.listings
	}
	if l.opts.longtail && !l.opts.feed {
		n = max(n, l.opts.longtailListings)
	}
	if err := l.importPG(ctx, 1, max(n, 1), photosOf); err != nil {
		return err
	}
	if err := l.importSQLite(ctx, "embedded.db", 1, 1, photosOf); err != nil {
		return err
	}
	return l.flushRedis(ctx)
}

// embeddedEnv is the environment of a gateway on the embedded store,
// without Redis.
func (l *lab) embeddedEnv(extra ...string) []string { return l.sqliteEnv("embedded.db", extra...) }

// sqliteEnv is the environment of a gateway on the SQLite store file (in
// the work directory), without Redis.
func (l *lab) sqliteEnv(file string, extra ...string) []string {
	return l.gatewayEnv(append([]string{"GATEWAY_STORE_URL=sqlite:" + filepath.Join(l.work, file), "GATEWAY_REDIS_URL="}, extra...)...)
}

// pgSeeded reports whether the database has the bench's firm already (a
// database kept with -db).
func (l *lab) pgSeeded(ctx context.Context) (bool, error) {
	db, err := pgx.Connect(ctx, l.dbURL)
	if err != nil {
		return false, err
	}
	defer db.Close(context.Background())
	var seeded bool
	err = db.QueryRow(ctx, `SELECT to_regclass('firms') IS NOT NULL AND EXISTS (SELECT 1 FROM firms WHERE id = 1)`).Scan(&seeded)
	if err != nil { // the subquery is planned even when the table is missing
		return false, nil
	}
	return seeded, nil
}

// importBatch is the number of listings one `gateway listing import` gets.
const importBatch = 10_000

// importPG imports listings from..to into PostgreSQL through the gateway's
// own import (so that every column the store keeps is filled as in
// production), skipping those a kept database has. The change feed's
// trigger is off meanwhile and Redis is not configured: a bulk load, as
// an operator's restore would be, that leaves the gateways no backlog to
// apply when they start (which would read every listing and fill Redis
// with it).
func (l *lab) importPG(ctx context.Context, from, to int, photos func(int) int) error {
	db, err := pgx.Connect(ctx, l.dbURL)
	if err != nil {
		return err
	}
	defer db.Close(context.Background())
	var have, last int
	if err := db.QueryRow(ctx, `SELECT count(*), COALESCE(max(id), 0) FROM listings WHERE id BETWEEN $1 AND $2`, from, to).Scan(&have, &last); err != nil {
		return err
	}
	if have == to-from+1 {
		log.Printf("PostgreSQL has listings %d..%d", from, to)
		return nil
	}
	if have > 0 {
		from = last + 1 // an import stopped part way
	}
	// A release from before the change feed (-release) has no feed.
	var feed bool
	if err := db.QueryRow(ctx, `SELECT to_regclass('listing_changes') IS NOT NULL`).Scan(&feed); err != nil {
		return err
	}
	if feed {
		if err := setTriggers(ctx, db, false); err != nil {
			return err
		}
		defer func() { _ = setTriggers(context.Background(), db, true) }()
	}
	log.Printf("importing listings %d..%d into PostgreSQL", from, to)
	began := time.Now()
	for at := from; at <= to; at += importBatch {
		end := min(at+importBatch-1, to)
		if _, err := l.admin(ctx, l.gatewayEnv("GATEWAY_REDIS_URL="), strings.NewReader(listingsJSON(at, end, photos)), "listing", "import", "-"); err != nil {
			return err
		}
		if done := end - from + 1; done%100_000 == 0 {
			log.Printf("  %d imported, %v", done, time.Since(began).Round(time.Second))
		}
	}
	if !feed {
		return nil
	}
	// Nothing is left for the feed to apply, whatever the triggers did.
	_, err = db.Exec(ctx, `UPDATE listing_changes SET applied_at = $1, done_at = $1 WHERE done_at IS NULL`, time.Now().UnixMilli())
	return err
}

// importSQLite imports listings from..to into the SQLite store file, and
// marks the changes its triggers recorded done, for the same reason.
func (l *lab) importSQLite(ctx context.Context, file string, from, to int, photos func(int) int) error {
	for at := from; at <= to; at += importBatch {
		end := min(at+importBatch-1, to)
		if _, err := l.admin(ctx, l.sqliteEnv(file), strings.NewReader(listingsJSON(at, end, photos)), "listing", "import", "-"); err != nil {
			return err
		}
	}
	// A gateway on the file may hold its lock a moment.
	db, err := sql.Open("sqlite", filepath.Join(l.work, file)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	defer db.Close()
	var feed bool
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'listing_changes')`).Scan(&feed); err != nil || !feed {
		return err // a release from before the change feed has none (-release)
	}
	_, err = db.ExecContext(ctx, `UPDATE listing_changes SET applied_at = ?, done_at = ? WHERE done_at IS NULL`, time.Now().UnixMilli(), time.Now().UnixMilli())
	return err
}

// photosOf is the number of photos of a listing: the hot one has 12 (a
// 2,727-byte response), the others 2 to 12, so that the responses are
// 1.6 to 2.7 KB, 2.2 KB on average.
func photosOf(id int) int {
	if id == 1 {
		return 12
	}
	return 2 + id*7%11
}

// listingsJSON is an import file of listings from..to, each the size of a
// real listing page: about 1.5 KB as a response, and 108 bytes per photo.
func listingsJSON(from, to int, photos func(int) int) string {
	var b strings.Builder
	b.WriteString("[")
	for id := from; id <= to; id++ {
		if id > from {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id":%d,"no":%d,"firmId":1,"firmUserId":1,"title":"Sea-view flat %d","categoryId":1,"subCategoryId":4,`+
			`"createdDate":1700000000000,"updatedDate":1700000100000,"endDate":1800000000000,"note":"Viewing by appointment",`+
			`"realtyDetailUrl":"https://example.com/realty/%d","realtyIdentificationNo":"TR-34-1203-%d","energyDocumentNo":"E-2024-0077",`+
			`"location":{"cityId":34,"cityName":"Istanbul","countyId":12,"countyName":"Kadikoy","districtId":1203,"districtName":"Moda","latitude":40.98,"longitude":29.02,"nearLocation":true},`+
			`"attributes":{"description":"Bright three-room flat, renovated in 2023, close to the ferry.","price":8500000,"priceCurrencyType":"TRY","room":3,"livingRoom":1,"bathRoom":2,"sqm":120,"netSqm":105,"age":12,"floorCount":6,"heatingId":2,"floorId":4,"furnished":false,"sideIdList":[1,2,3],"selectedAttributeList":[{"groupId":1,"selectedIds":[3,4]},{"groupId":2,"selectedIds":[7]}]},`+
			`"realtyFiles":[`, id, id, id, id, id)
		for n := 1; n <= photos(id); n++ {
			if n > 1 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"id":%d,"imageUrl":"https://img.example.com/%d/photo-%d.jpg","sortOrder":%d,"imageType":"IMAGE","status":"APPROVED"}`, n, id, n, n)
		}
		b.WriteString("]}")
	}
	b.WriteString("]")
	return b.String()
}

// flushRedis removes the run's keys, so that reads start cold.
func (l *lab) flushRedis(ctx context.Context) error { return l.flushPrefix(ctx, l.prefix) }

// flushPrefix removes the keys under prefix.
func (l *lab) flushPrefix(ctx context.Context, prefix string) error {
	rdb := redis.NewClient(&redis.Options{Addr: l.redisAddr})
	defer rdb.Close()
	if err := testenv.DeleteKeys(ctx, rdb, prefix+"*"); err != nil {
		return fmt.Errorf("flush Redis: %w", err)
	}
	return nil
}

// startAll starts every server; pinned puts servers on CPU 0 with
// GOMAXPROCS=1 (wrk then runs on CPU 1).
func (l *lab) startAll(ctx context.Context, pinned bool) error {
	gateways := []struct {
		name string
		env  []string
	}{
		{"gateway-local", nil},
		{"gateway-redis", []string{"GATEWAY_LOCAL_CACHE_BYTES=0"}},
		{"gateway-embedded", []string{"GATEWAY_STORE_URL=sqlite:" + filepath.Join(l.work, "embedded.db"), "GATEWAY_REDIS_URL="}},
	}
	for _, g := range gateways {
		if _, err := l.startGateway(ctx, g.name, pinned, "", g.env...); err != nil {
			return err
		}
	}
	if err := l.startMissCases(ctx, pinned); err != nil {
		return err
	}
	if l.token == "" {
		if err := l.login(); err != nil {
			return err
		}
	}
	if err := l.hotBody(); err != nil {
		return err
	}
	return l.startBaselines(ctx, pinned)
}

// startMiss starts the two store-miss cases alone (-miss without -cases).
func (l *lab) startMiss(ctx context.Context) error {
	if err := l.startMissCases(ctx, false); err != nil {
		return err
	}
	return l.login()
}

// startMissCases starts gateway-miss: without Redis and with a one-byte
// local tier every read is a store read; and gateway-miss-redis, the
// production shape: Redis configured (its own prefix, emptied before each
// run) and the default local tier. Both walk distinct listings.
func (l *lab) startMissCases(ctx context.Context, pinned bool) error {
	// The Redis gateway first: the first to start holds the change feed,
	// and a gateway without Redis that holds it never vouches for Redis,
	// so that the others would never trust it.
	s, err := l.startGateway(ctx, "gateway-miss-redis", pinned, l.prefix+"miss:")
	if err != nil {
		return err
	}
	s.script = "walk.lua"
	if s, err = l.startGateway(ctx, "gateway-miss", pinned, "", "GATEWAY_REDIS_URL=", "GATEWAY_LOCAL_CACHE_BYTES=1"); err != nil {
		return err
	}
	s.script = "walk.lua"
	// The naive composition on the same walk, with its own (emptied) keys.
	nv, err := l.startNaive(ctx, "naive-miss", pinned, l.prefix+"naivemiss:")
	if err != nil {
		return err
	}
	nv.script = "walk.lua"
	return nil
}

// startNaive starts the naive composition (serve-naive-longtail) named
// name, its Redis keys under prefix.
func (l *lab) startNaive(ctx context.Context, name string, pinned bool, prefix string) (*server, error) {
	s := &server{name: name, addr: freeAddr(), auth: true, path: "/realty/1", prefix: prefix, naive: true}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	return s, l.start(ctx, s, pinned, env, l.self, "serve-naive-longtail", s.addr, l.redisAddr, prefix, jwtSecret, l.dbURL)
}

// startGateway starts a gateway named name with the run's settings and
// extra; a non-empty prefix is its own Redis key prefix.
func (l *lab) startGateway(ctx context.Context, name string, pinned bool, prefix string, extra ...string) (*server, error) {
	s := &server{name: name, addr: freeAddr(), admin: freeAddr(), auth: true, path: "/realty/1", prefix: l.prefix}
	env := []string{"GATEWAY_ADDR=" + s.addr, "GATEWAY_ADMIN_ADDR=" + s.admin}
	if prefix != "" {
		s.prefix = prefix
		env = append(env, "GATEWAY_REDIS_PREFIX="+prefix)
	}
	if pinned {
		env = append(env, "GOMAXPROCS=1")
	}
	s.redisless = slices.Contains(extra, "GATEWAY_REDIS_URL=")
	s.embedded = slices.ContainsFunc(extra, func(e string) bool { return strings.HasPrefix(e, "GATEWAY_STORE_URL=sqlite:") })
	if err := l.start(ctx, s, pinned, l.gatewayEnv(append(env, extra...)...), l.gateway); err != nil {
		return nil, err
	}
	waitReady(s)
	return s, nil
}

// waitReady waits, at most 10 s, for a gateway's /readyz: a gateway with
// Redis is ready once the change feed vouched for Redis, or 5 s after it
// started.
func waitReady(s *server) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + s.admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	log.Printf("%s is not ready after 10 s; measuring it anyway", s.name)
}

// stopServer ends one server that the run started.
func (l *lab) stopServer(s *server) {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	l.started = slices.DeleteFunc(l.started, func(c *exec.Cmd) bool { return c == s.cmd })
	delete(l.servers, s.name)
}

// login gets the token from one of the gateways.
func (l *lab) login() error {
	var addr string
	for _, name := range slices.Sorted(maps.Keys(l.servers)) { // a gateway on PostgreSQL, whose key l.apiKey is
		if s := l.servers[name]; s.admin != "" && !s.embedded {
			addr = s.addr
			break
		}
	}
	if addr == "" {
		return errors.New("login: no gateway on PostgreSQL is running")
	}
	tok, err := l.loginAt(addr)
	l.token = tok
	return err
}

// loginAt logs the bench's user in at the gateway on addr.
func (l *lab) loginAt(addr string) (string, error) { return l.loginWith(addr, l.apiKey) }

// loginWith logs the bench's user in at the gateway on addr with the
// firm's API key key.
func (l *lab) loginWith(addr, key string) (string, error) {
	body := fmt.Sprintf(`{"email":"bench@bench.example","key":%q}`, key)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/auth/login", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "bench")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct {
		JWTToken string `json:"jwtToken"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.JWTToken == "" {
		return "", fmt.Errorf("login: %d %v", resp.StatusCode, err)
	}
	return out.JWTToken, nil
}

// hotBody reads the hot listing from every gateway: all must answer the
// same bytes, which the baselines then serve.
func (l *lab) hotBody() error {
	for _, name := range []string{"gateway-local", "gateway-redis", "gateway-embedded", "gateway-miss", "gateway-miss-redis"} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+l.servers[name].addr+"/realty/1", nil)
		req.Header.Set("Authorization", "Bearer "+l.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			return fmt.Errorf("%s /realty/1: %d %v", name, resp.StatusCode, err)
		}
		if l.body == nil {
			l.body = b
		} else if string(b) != string(l.body) {
			return fmt.Errorf("%s answers other bytes than gateway-local", name)
		}
	}
	return nil
}

func (l *lab) startBaselines(ctx context.Context, pinned bool) error {
	file, err := l.bodyFile()
	if err != nil {
		return err
	}
	goEnv := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	if pinned {
		goEnv = append(goEnv, "GOMAXPROCS=1")
	}
	static, err := l.startStatic(ctx, pinned, file)
	if err != nil {
		return err
	}
	key := l.prefix + "naive:1"
	if err := l.setNaiveKey(ctx, key); err != nil {
		return err
	}
	naive := &server{name: "naive", addr: freeAddr(), auth: true, path: "/realty/1"}
	if err := l.start(ctx, naive, pinned, goEnv, l.self, "serve-naive", naive.addr, l.redisAddr, key, jwtSecret); err != nil {
		return err
	}
	workers := "auto"
	if pinned {
		workers = "1"
	}
	nginxAddr := freeAddr()
	conf := filepath.Join(l.work, "nginx.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`daemon off; worker_processes %s; pid %s/nginx.pid; error_log stderr error;
events { worker_connections 4096; }
http { access_log off; default_type application/json; sendfile on; tcp_nopush on; keepalive_requests 1000000;
  server { listen %s; root %s/www; } }`, workers, l.work, nginxAddr, l.work)), 0o644); err != nil {
		return err
	}
	if err := l.start(ctx, &server{name: "nginx-static", addr: nginxAddr, path: "/realty/1"}, pinned, goEnv, "nginx", "-c", conf, "-p", l.work); err != nil {
		return err
	}
	varnishAddr := freeAddr()
	threads := "-p thread_pools=2"
	if pinned {
		threads = "-p thread_pools=1"
	}
	args := append([]string{"-F", "-a", varnishAddr, "-b", static.addr, "-s", "malloc,64m", "-n", filepath.Join(l.work, "varnish"+randomHex(2))},
		strings.Fields(threads)...)
	if err := l.start(ctx, &server{name: "varnish-hit", addr: varnishAddr, path: "/realty/1"}, pinned, goEnv, "varnishd", args...); err != nil {
		return err
	}
	return nil
}

// bodyFile writes the hot listing's bytes where nginx serves them from,
// and returns the file.
func (l *lab) bodyFile() (string, error) {
	file := filepath.Join(l.work, "www", "realty", "1")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return "", err
	}
	return file, os.WriteFile(file, l.body, 0o644)
}

// startStatic starts fiber-static, a bare Fiber handler sending file's
// bytes from memory.
func (l *lab) startStatic(ctx context.Context, pinned bool, file string) (*server, error) {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	if pinned {
		env = append(env, "GOMAXPROCS=1")
	}
	static := &server{name: "fiber-static", addr: freeAddr(), path: "/realty/1"}
	return static, l.start(ctx, static, pinned, env, l.self, "serve-static", static.addr, file)
}

// setNaiveKey stores the hot body under key for the naive server.
func (l *lab) setNaiveKey(ctx context.Context, key string) error {
	cmd := exec.CommandContext(ctx, "redis-cli", "-h", hostOf(l.redisAddr), "-p", portOf(l.redisAddr), "-x", "SET", key)
	cmd.Stdin = strings.NewReader(string(l.body))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("redis-cli SET: %w\n%s", err, out)
	}
	return nil
}

// start runs a server, pinned to CPU 0 if asked, and waits until it
// answers on its address.
func (l *lab) start(ctx context.Context, s *server, pinned bool, env []string, bin string, args ...string) error {
	if pinned {
		args = append([]string{"-c", "0", bin}, args...)
		bin = "taskset"
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env, cmd.Dir = env, l.work
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logFile, err := os.Create(filepath.Join(l.work, s.name+".log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.name, err)
	}
	s.cmd = cmd
	l.started = append(l.started, cmd)
	l.servers[s.name] = s
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", s.addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logFile.Name())
			return fmt.Errorf("%s did not listen on %s:\n%s", s.name, s.addr, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopAll ends every process this run started (each in its own process
// group, so nginx's and varnish's children go too) and drops the database.
func (l *lab) stopAll() {
	for _, cmd := range l.started {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		}
	}
	for _, cmd := range l.started {
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	l.started, l.servers = nil, map[string]*server{}
	if l.redisAddr != "" {
		_ = l.flushRedis(context.Background())
	}
	if l.dropDB != nil {
		l.dropDB()
		l.dropDB = nil
	}
}

// restart stops the servers (keeping the database) and starts them again.
func (l *lab) restart(ctx context.Context, pinned bool) error {
	drop := l.dropDB
	l.dropDB = nil
	l.stopAll()
	l.dropDB = drop
	return l.startAll(ctx, pinned)
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err) // the loopback always has a free port
	}
	defer ln.Close()
	return ln.Addr().String()
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func hostOf(addr string) string { h, _, _ := net.SplitHostPort(addr); return h }
func portOf(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }
