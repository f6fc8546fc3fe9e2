package e2e

// End-to-end tests of the change feed: writers other than the gateway (SQL
// on the database, as the listing application and operators write it)
// and a gateway that dies between its commit and its cache update. Two
// gateway processes share PostgreSQL and Redis; the first one started is
// the feed's consumer.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
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

// feedWorld is the world of newWorld on PostgreSQL and Redis, with n
// gateways, a connection to the database for writing behind them, and a
// token of each firm. Its caches keep listings, and their absence, fresh
// for an hour (feedEnv): far beyond the tests' patience, so that only the
// feed can show a write made behind the gateways within it, and a test
// fails when the feed is off or broken.
type feedWorld struct {
	world
	prefix     string
	db         *pgx.Conn
	gws        []*process
	tok, other string // firm 1's and firm 2's users
}

func newFeedWorld(t *testing.T, n int, extra environment) *feedWorld {
	t.Helper()
	pgURL := testenv.PostgresURL(t)
	e, prefix := postgresEnv(t, pgURL, testenv.RedisAddr(t))
	maps.Copy(e, feedEnv(t))
	maps.Copy(e, extra)
	fw := &feedWorld{world: newWorld(t, e), prefix: prefix}
	db, err := pgx.Connect(context.Background(), pgURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	fw.db = db
	for i := range n {
		fw.gws = append(fw.gws, start(t, maps.Clone(e)))
		if i == 0 { // the first one is the consumer
			fw.waitConsumer(t, fw.gws[0])
		}
	}
	fw.tok = fw.gws[0].token(t, fw.otpLogin())
	fw.other = fw.gws[0].token(t, fw.otherLogin())
	for _, p := range fw.gws {
		testenv.WaitFor(t, func() bool {
			s, err := p.ReadStats()
			return err == nil && s.Cache.RedisTrusted && s.Cache.LocalTierOn
		})
	}
	return fw
}

func (fw *feedWorld) waitConsumer(t *testing.T, p *process) {
	t.Helper()
	testenv.WaitFor(t, func() bool {
		s, err := p.ReadStats()
		return err == nil && s.Feed.Consumer
	})
}

// feedFresh is how long the feed tests' caches keep a listing, and its
// absence, fresh: what shows a write made behind the gateways before it
// is the feed alone.
const feedFresh = time.Hour

// feedEnv is the cache settings of the feed tests (feedFresh); it fails
// the test where the patience is not below them.
func feedEnv(t *testing.T) environment {
	t.Helper()
	testenv.NeedPatienceBelow(t, feedFresh, "the feed tests' cache freshness")
	return environment{"GATEWAY_CACHE_TTL": feedFresh.String(), "GATEWAY_NEGATIVE_TTL": feedFresh.String()}
}

// exec runs SQL on the database as another writer.
func (fw *feedWorld) exec(t *testing.T, stmt string, args ...any) {
	t.Helper()
	if _, err := fw.db.Exec(context.Background(), stmt, args...); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// TestEndToEndFeedUpdatesFromSQL: UPDATEs made in SQL that leave the
// revision alone reach both replicas on both keys, and once a replica
// served the new title on a key it never serves the old one again. 200
// updates: 10 rounds over 20 listings. The caches keep the old title fresh
// for an hour, so without the feed no view turns new and the test fails
// after its patience. The lag (p50, p99) is logged here and measured in
// deploy/bench; on a quiet machine it is tens of milliseconds.
func TestEndToEndFeedUpdatesFromSQL(t *testing.T) {
	fw := newFeedWorld(t, 2, nil)
	const listings, rounds = 20, 10
	var entries []string
	for i := range listings {
		entries = append(entries, fmt.Sprintf(`{"id":%d,"no":%d,"firmId":%d,"firmUserId":%d,"title":"r0-%d","categoryId":1,"location":{"cityId":6}}`,
			2001+i, 101+i, fw.firm, fw.pwUser, i))
	}
	admin(t, fw.env, "["+strings.Join(entries, ",")+"]", "listing", "import", "-")
	type view struct {
		gw   *process
		path string
	}
	views := func(i int) []view {
		var vs []view
		for _, p := range fw.gws {
			vs = append(vs, view{p, fmt.Sprintf("/realty/%d", 2001+i)}, view{p, fmt.Sprintf("/realty/%d-%d", fw.firm, 101+i)})
		}
		return vs
	}
	for i := range listings { // every replica holds every key
		for _, v := range views(i) {
			for range 2 {
				if got := titleOf(t, v.gw.view(t, v.path, fw.tok)); got != fmt.Sprintf("r0-%d", i) {
					t.Fatalf("%s: %q", v.path, got)
				}
			}
		}
	}

	patience := testenv.Patience()
	var lags []time.Duration
	for round := 1; round <= rounds; round++ {
		committed := make([]time.Time, listings)
		for i := range listings {
			fw.exec(t, `UPDATE listings SET document = replace(document, $1, $2) WHERE id = $3`,
				fmt.Sprintf(`"title":"r%d-%d"`, round-1, i), fmt.Sprintf(`"title":"r%d-%d"`, round, i), 2001+i)
			committed[i] = time.Now()
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := range listings {
			wg.Go(func() {
				newTitle, oldTitle := fmt.Sprintf("r%d-%d", round, i), fmt.Sprintf("r%d-%d", round-1, i)
				seen := map[view]bool{}
				for len(seen) < 4 {
					for _, v := range views(i) {
						switch got := titleOf(t, v.gw.view(t, v.path, fw.tok)); {
						case got == newTitle:
							seen[v] = true
						case got == oldTitle && seen[v]:
							t.Errorf("%s on %s served the old title after the new one", v.path, v.gw.Base)
							return
						case got != oldTitle:
							t.Errorf("%s: title %q", v.path, got)
							return
						}
					}
					if len(seen) == 4 {
						break
					}
					if time.Since(committed[i]) > patience {
						t.Errorf("listing %d: %d of 4 views new %v after the commit (GATEWAY_TEST_PATIENCE)", 2001+i, len(seen), patience)
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
				mu.Lock()
				lags = append(lags, time.Since(committed[i]))
				mu.Unlock()
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	slices.Sort(lags)
	t.Logf("lag from commit to the new title on both replicas and both keys, %d updates: p50 %v, p99 %v, max %v",
		len(lags), lags[len(lags)/2], lags[len(lags)*99/100], lags[len(lags)-1])
	for _, p := range fw.gws {
		if s := p.Stats(t); s.Cache.Corrupt != 0 {
			t.Fatalf("%s: %d corrupt values", p.Base, s.Cache.Corrupt)
		}
	}
}

// TestEndToEndFeedInsertFromSQL: a listing number read as 404 (and so
// cached as absent for an hour), then INSERTed in SQL, is served by both
// replicas in both forms.
func TestEndToEndFeedInsertFromSQL(t *testing.T) {
	fw := newFeedWorld(t, 2, nil)
	byNumber := fmt.Sprintf("/realty/%d-99", fw.firm)
	for _, p := range fw.gws {
		for range 2 {
			if r := p.view(t, byNumber, fw.tok); r.status != http.StatusNotFound {
				t.Fatalf("%s before the insert: %d", byNumber, r.status)
			}
		}
	}
	doc := fmt.Sprintf(`{"id":3001,"listingId":"%d-99","title":"Inserted behind","firmId":%d,"firmUserId":%d,"no":99,"isActive":true}`, fw.firm, fw.firm, fw.pwUser)
	fw.exec(t, `INSERT INTO listings (id, firm_id, no, firm_user_id, is_active, revision, document) VALUES (3001, $1, 99, $2, true, 1, $3)`,
		fw.firm, fw.pwUser, doc)
	for _, p := range fw.gws {
		for _, path := range []string{byNumber, "/realty/3001"} {
			lag := eventually(t, path+" on "+p.Base, func() bool { return p.view(t, path, fw.tok).status == http.StatusOK })
			t.Logf("%s on %s: 200 after %v", path, p.Base, lag)
			if got := titleOf(t, p.view(t, path, fw.tok)); got != "Inserted behind" {
				t.Fatalf("%s: %q", path, got)
			}
		}
	}
}

// purgeLog is a fake CDN taking Varnish xkey purges.
type purgeLog struct {
	mu  sync.Mutex
	got []string // "hard realty-1001" or "soft realty-1001"
	url string
}

func newPurgeLog(t *testing.T) *purgeLog {
	pl := &purgeLog{}
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		pl.mu.Lock()
		defer pl.mu.Unlock()
		for _, k := range strings.Fields(r.Header.Get("Xkey-Purge")) {
			pl.got = append(pl.got, "hard "+k)
		}
		for _, k := range strings.Fields(r.Header.Get("Xkey-Softpurge")) {
			pl.got = append(pl.got, "soft "+k)
		}
	}))
	t.Cleanup(srv.Close)
	pl.url = srv.URL + "/"
	return pl
}

func (pl *purgeLog) has(entry string) bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return slices.Contains(pl.got, entry)
}

// TestEndToEndFeedVisibilityFromSQL: in CDN mode, an is_active flip and a
// hard DELETE made in SQL make the listing 404 for other firms on both
// replicas, in both forms, and purge the CDN hard; an update that
// keeps it visible purges soft.
func TestEndToEndFeedVisibilityFromSQL(t *testing.T) {
	cdn := newPurgeLog(t)
	fw := newFeedWorld(t, 2, environment{
		"GATEWAY_CDN_MODE": "true", "GATEWAY_CDN_PURGE_URL": cdn.url, "GATEWAY_CDN_PURGE_FORMAT": "varnish-xkey",
		"GATEWAY_CDN_PURGE_SOFT": "true", "GATEWAY_CDN_REPURGE_AFTER": "1h",
	})
	third := int64(0)
	if err := fw.db.QueryRow(context.Background(), `SELECT id FROM listings WHERE document LIKE '%"title":"Third"%'`).Scan(&third); err != nil {
		t.Fatal(err)
	}
	paths := map[int64][]string{
		1001:  {"/realty/1001", fmt.Sprintf("/realty/%d-7", fw.firm)},
		third: {fmt.Sprintf("/realty/%d", third)},
	}
	for _, ps := range paths {
		for _, p := range fw.gws {
			for _, path := range ps {
				if r := p.view(t, path, fw.other); r.status != http.StatusOK {
					t.Fatalf("%s for firm 2: %d", path, r.status)
				}
			}
		}
	}

	fw.exec(t, `UPDATE listings SET document = replace(document, '"title":"Sea view"', '"title":"Sea view, renovated"') WHERE id = 1001`)
	eventually(t, "soft purge of realty-1001", func() bool { return cdn.has("soft realty-1001") })

	fw.exec(t, `UPDATE listings SET is_active = false WHERE id = 1001`)
	fw.exec(t, `DELETE FROM listings WHERE id = $1`, third)
	for id, ps := range paths {
		for _, p := range fw.gws {
			for _, path := range ps {
				eventually(t, path+" for firm 2 on "+p.Base, func() bool { return p.view(t, path, fw.other).status == http.StatusNotFound })
			}
		}
		eventually(t, fmt.Sprintf("hard purge of realty-%d", id), func() bool { return cdn.has(fmt.Sprintf("hard realty-%d", id)) })
	}
	// The passive listing stays readable by its own firm; the removed one by nobody.
	if got := titleOf(t, fw.gws[1].view(t, "/realty/1001", fw.tok)); got != "Sea view, renovated" {
		t.Fatalf("owner's read of the passive listing: %q", got)
	}
	if r := fw.gws[1].view(t, fmt.Sprintf("/realty/%d", third), fw.tok); r.status != http.StatusNotFound {
		t.Fatalf("owner's read of the removed listing: %d", r.status)
	}
}

// TestEndToEndFeedWriterDeath: gateway 1 dies (SIGKILL, from a fault point)
// right after its store commit, before any cache, replica or CDN heard of
// the write; gateway 2, which held the old version in its local tier and
// in Redis, serves the new one, in both forms.
func TestEndToEndFeedWriterDeath(t *testing.T) {
	bin := faultGateway(t)
	fw := newFeedWorld(t, 1, nil) // gateway 2: the consumer
	reader := fw.gws[0]
	e := maps.Clone(fw.env)
	e["GATEWAY_FAULTPOINT"] = "after-commit"
	writer := &process{gatewaytest.Start(t, bin, e)}
	writeTok := writer.token(t, fw.passwordLogin())
	paths := []string{"/realty/1001", fmt.Sprintf("/realty/%d-7", fw.firm)}
	for _, path := range paths {
		for range 2 {
			if got := titleOf(t, reader.view(t, path, fw.tok)); got != "Sea view" {
				t.Fatalf("%s: %q", path, got)
			}
		}
	}

	req, err := http.NewRequest(http.MethodPut, writer.Base+"/realty/1001",
		strings.NewReader(`{"title":"Written by a gateway that died","categoryId":2,"location":{"cityId":34}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+writeTok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "e2e-test")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("PUT answered %d; want the writer to die", resp.StatusCode)
	}
	died := time.Now()
	if err := writer.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("writer exit: %v; want killed", err)
	}
	var title string
	if err := fw.db.QueryRow(context.Background(), `SELECT document::json->>'title' FROM listings WHERE id = 1001`).Scan(&title); err != nil || title != "Written by a gateway that died" {
		t.Fatalf("stored title %q, %v; want the write committed", title, err)
	}
	for _, path := range paths {
		eventually(t, path+" after the writer died", func() bool {
			return titleOf(t, reader.view(t, path, fw.tok)) == "Written by a gateway that died"
		})
	}
	t.Logf("new version served %v after the writer died", time.Since(died))
}

// TestEndToEndFeedSQLiteShell: with the embedded store and no Redis, a
// write made by another process on the SQLite file (the sqlite3 shell,
// older than the SQLite this build embeds) is served, where the cache
// would keep the old version fresh for an hour.
func TestEndToEndFeedSQLiteShell(t *testing.T) {
	shell, err := exec.LookPath("sqlite3")
	if err != nil {
		if testenv.RequireServices() {
			t.Fatalf("no sqlite3 shell and GATEWAY_TEST_REQUIRE_SERVICES=1: %v", err)
		}
		t.Skipf("SKIP: no sqlite3 shell (%v)", err)
	}
	e := sqliteEnv(t)
	maps.Copy(e, feedEnv(t))
	w := newWorld(t, e)
	p := start(t, e)
	tok := p.token(t, w.otpLogin())
	for range 2 {
		if r := p.view(t, "/realty/1001", tok); titleOf(t, r) != "Sea view" {
			t.Fatalf("title %q", titleOf(t, r))
		}
	}
	if r := p.view(t, "/realty/1001", tok); r.header.Get("X-Cache") != "HIT" {
		t.Fatalf("X-Cache %q; want the in-process tier to hold it", r.header.Get("X-Cache"))
	}
	cmd := exec.Command(shell, filepath.Join(e["GATEWAY_DATA_DIR"], "gateway.db"),
		`PRAGMA busy_timeout = 5000; UPDATE listings SET document = replace(document, '"title":"Sea view"', '"title":"From sqlite3"') WHERE id = 1001;`)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sqlite3: %v\n%s", err, out)
	}
	lag := eventually(t, "the shell's write", func() bool { return titleOf(t, p.view(t, "/realty/1001", tok)) == "From sqlite3" })
	t.Logf("served %v after the shell's write", lag)
}

// TestEndToEndRedisClientLogsJSON: the Redis client's own lines (a failed
// dial) come out through the gateway's JSON log, like every other line.
func TestEndToEndRedisClientLogsJSON(t *testing.T) {
	e := sqliteEnv(t)
	e["GATEWAY_REDIS_URL"] = "redis://" + gatewaytest.FreeAddr(t) + "/0" // nothing listens
	e["GATEWAY_REDIS_TIMEOUT"] = "50ms"
	p := start(t, e)
	eventually(t, "a line from the Redis client", func() bool { return strings.Contains(p.Logs(), `"msg":"redis client"`) })
	for line := range strings.Lines(p.Logs()) {
		if !json.Valid([]byte(line)) {
			t.Fatalf("a log line that is not JSON: %q", line)
		}
	}
}

// TestEndToEndFeedOwnWritesNotRepeated: the gateway's own writes settle
// their records, so the feed's consumer neither announces nor purges them
// a second time. The settler marks them off the request path; the feed
// leaves them to it for ownSettle (the default, 250 ms, is for a quiet
// machine: a settle later than that costs a second purge, not a wrong
// answer).
func TestEndToEndFeedOwnWritesNotRepeated(t *testing.T) {
	const ownSettle = 10 * time.Second
	cdn := newPurgeLog(t)
	fw := newFeedWorld(t, 2, environment{
		"GATEWAY_CDN_MODE": "true", "GATEWAY_CDN_PURGE_URL": cdn.url, "GATEWAY_CDN_PURGE_FORMAT": "varnish-xkey",
		"GATEWAY_CDN_REPURGE_AFTER": "1h", "GATEWAY_FEED_SETTLE": ownSettle.String(),
	})
	consumer, writer := fw.gws[0], fw.gws[1]
	tok := writer.token(t, fw.passwordLogin())
	undone := func() int {
		var n int
		if err := fw.db.QueryRow(context.Background(), `SELECT count(*) FROM listing_changes WHERE done_at IS NULL`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	within(t, ownSettle+testenv.Patience(), "the import applied", func() bool { return undone() == 0 })
	applied := consumer.Stats(t).Feed.Applied
	cdn.mu.Lock()
	cdn.got = nil
	cdn.mu.Unlock()
	const writes = 20
	for v := range writes {
		put(t, writer, "/realty/1001", tok, v+1)
	}
	eventually(t, "the gateway's own changes done", func() bool { return undone() == 0 })
	eventually(t, "a purge per write", func() bool {
		cdn.mu.Lock()
		defer cdn.mu.Unlock()
		return len(cdn.got) >= writes
	})
	time.Sleep(time.Second) // several polls: a second purge or application would show
	if got := consumer.Stats(t).Feed.Applied - applied; got != 0 {
		t.Fatalf("the consumer applied %d of the gateway's own changes again", got)
	}
	cdn.mu.Lock()
	defer cdn.mu.Unlock()
	if len(cdn.got) != writes {
		t.Fatalf("the CDN got %d purges for %d writes: %q", len(cdn.got), writes, cdn.got)
	}
}

// TestEndToEndFeedWriterCutOffFromRedis: a gateway whose Redis fails
// (here: it cannot connect) still takes writes, while the other gateway
// trusts Redis, which holds the old version. The write returns only once
// the change feed has applied it: from then on the other gateway never
// serves the old version.
func TestEndToEndFeedWriterCutOffFromRedis(t *testing.T) {
	fw := newFeedWorld(t, 1, nil) // gateway 1: the consumer and the reader
	reader := fw.gws[0]
	cut := faultproxy.New(t, testenv.RedisAddr(t))
	e := maps.Clone(fw.env)
	e["GATEWAY_REDIS_URL"] = "redis://" + cut.Addr() + "/0"
	writer := start(t, e)
	testenv.WaitFor(t, func() bool { s, err := writer.ReadStats(); return err == nil && s.Cache.RedisTrusted })
	paths := []string{"/realty/1001", fmt.Sprintf("/realty/%d-7", fw.firm)}
	for _, path := range paths {
		for range 2 { // the second read is a Redis or local hit
			if got := titleOf(t, reader.view(t, path, fw.tok)); got != "Sea view" {
				t.Fatalf("%s: %q", path, got)
			}
		}
	}

	cut.Stop()
	var took []time.Duration
	for v := range 5 {
		title := fmt.Sprintf("Written without Redis, v%d", v)
		began := time.Now()
		r, err := send(writer, http.MethodPut, "/realty/1001", fw.tok,
			fmt.Sprintf(`{"title":%q,"categoryId":2,"location":{"cityId":34}}`, title))
		if err != nil || r.status != http.StatusOK {
			t.Fatalf("PUT: %v %d %s", err, r.status, r.body)
		}
		took = append(took, time.Since(began))
		for _, path := range paths {
			if got := titleOf(t, reader.view(t, path, fw.tok)); got != title {
				t.Fatalf("%s on the other gateway after the PUT returned: %q; want %q", path, got, title)
			}
		}
	}
	t.Logf("PUTs through a gateway cut off from Redis returned after %v", took)
}
