package e2e

// The change feed under faults: its consumer killed mid-batch or cut off
// silently, PostgreSQL restarted, Redis restarted empty or from an older
// snapshot, and a Redis Sentinel failover under load.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/faultproxy"
	"github.com/realty-gateway/gateway/internal/gatewaytest"
	"github.com/realty-gateway/gateway/internal/testenv"
)

// importNumbered imports n listings of firm 1, ids from first, numbers
// from 1001, titled "v0".
func importNumbered(t *testing.T, e environment, w world, first int64, n int) {
	t.Helper()
	entries := make([]string, n)
	for i := range n {
		entries[i] = fmt.Sprintf(`{"id":%d,"no":%d,"firmId":%d,"firmUserId":%d,"title":"v0","categoryId":1,"location":{"cityId":6}}`,
			first+int64(i), 1001+i, w.firm, w.pwUser)
	}
	if got := admin(t, e, "["+strings.Join(entries, ",")+"]", "listing", "import", "-"); got["imported"] != float64(n) {
		t.Fatalf("import printed %v", got)
	}
}

// keyRevision is the revision of the record under a Redis key, 0 when the
// key holds none.
func keyRevision(t *testing.T, rdb redis.UniversalClient, key string) int64 {
	t.Helper()
	v, err := rdb.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	f := strings.Fields(strings.SplitN(v, "\n", 2)[0])
	rev, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || f[0] != "v1" {
		t.Fatalf("%s holds %.60q", key, v)
	}
	return rev
}

// requireRedisMatchesStore checks every key of every listing of the
// database: a key that holds a record holds the database's revision.
func requireRedisMatchesStore(t *testing.T, db *pgx.Conn, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	ctx := context.Background()
	rows, err := db.Query(ctx, `SELECT id, firm_id, no, revision FROM listings`)
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ id, firm, no, revision int64 }
	var all []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.firm, &r.no, &r.revision); err != nil {
			t.Fatal(err)
		}
		all = append(all, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, r := range all {
		for _, key := range listingKeys(prefix, r.id, r.firm, r.no) {
			if got := keyRevision(t, rdb, key); got != 0 {
				checked++
				if got != r.revision {
					t.Errorf("%s holds revision %d; the database has %d", key, got, r.revision)
				}
			}
		}
	}
	t.Logf("%d keys of %d listings hold the database's revision", checked, len(all))
}

func unapplied(t *testing.T, db *pgx.Conn) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM listing_changes WHERE applied_at IS NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// primeByID reads listings first … first+n-1 through p, so that their
// by-id keys hold the listings for the cache's lifetime, not a floor that
// expires in seconds: a change that the feed loses then leaves an older
// revision behind, which requireByIDAt sees.
func primeByID(t *testing.T, p *process, tok string, first int64, n int) {
	t.Helper()
	ids := make(chan int64)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 4 {
		wg.Go(func() {
			for id := range ids {
				if r, err := send(p, http.MethodGet, fmt.Sprintf("/realty/%d", id), tok, ""); err != nil || r.status != http.StatusOK {
					failed.Add(1)
				}
			}
		})
	}
	for id := first; id < first+int64(n); id++ {
		ids <- id
	}
	close(ids)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d reads of the listings failed", n)
	}
}

// requireByIDAt checks that the by-id key of each listing first …
// first+n-1 holds the database's revision, and holds one at all.
func requireByIDAt(t *testing.T, db *pgx.Conn, rdb redis.UniversalClient, prefix string, first int64, n int) {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT id, revision FROM listings WHERE id BETWEEN $1 AND $2`, first, first+int64(n)-1)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]int64{}
	for rows.Next() {
		var id, rev int64
		if err := rows.Scan(&id, &rev); err != nil {
			t.Fatal(err)
		}
		want[id] = rev
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(want) != n {
		t.Fatalf("%d listings in the database; want %d", len(want), n)
	}
	bad := 0
	for id, rev := range want {
		key := fmt.Sprintf("%srealty:id:%d", prefix, id)
		if got := keyRevision(t, rdb, key); got != rev {
			if bad++; bad <= 5 {
				t.Errorf("%s holds revision %d; the database has %d", key, got, rev)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d by-id keys do not hold the database's revision", bad, n)
	}
}

// logTime is when a gateway wrote its first log line with msg.
func logTime(t *testing.T, p *process, msg string) (time.Time, bool) {
	t.Helper()
	times := logTimes(t, p, msg)
	if len(times) == 0 {
		return time.Time{}, false
	}
	return times[0], true
}

// logTimes is when a gateway wrote each of its log lines with msg.
func logTimes(t *testing.T, p *process, msg string) []time.Time {
	t.Helper()
	var times []time.Time
	sc := bufio.NewScanner(strings.NewReader(p.Logs()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == msg {
			times = append(times, line.Time)
		}
	}
	return times
}

// partitionTakeover is how long the server keeps a silent consumer's
// session, and so its hold (upstream/postgres: feedIdleTimeout, 10 s).
const partitionTakeover = 10 * time.Second

func (p *process) feedStats() (gatewaytest.Stats, bool) {
	s, err := p.ReadStats()
	return s, err == nil
}

// TestEndToEndFeedConsumerKilledMidBatch: 1,000 changes wait while the
// consumers' Redis is slow; whichever gateway consumes is killed with
// SIGKILL after its first batch of them, in the middle of the next; the
// other takes over, the backlog drains to 0, every Redis key holds the
// database's revision (every listing's by-id key was primed with a
// listing, so a lost change leaves an older one), and the changes were
// split between them: the victim marked its batches, the survivor marked
// the rest, and none of those the victim had marked again.
//
// The role may move before the kill (a consumer that cannot renew its
// hold on a busy machine gives it up): a round in which the victim was no
// longer the consumer when it died, or left nothing to take over, proves
// nothing, so it is logged, the dead gateway is replaced, and the round is
// written again, with whichever gateway consumes then.
func TestEndToEndFeedConsumerKilledMidBatch(t *testing.T) {
	const (
		listings = 1000
		batch    = 500 // feed.batch's default
		attempts = 3
	)
	pgURL := testenv.PostgresURL(t)
	e, prefix := postgresEnv(t, pgURL, testenv.RedisAddr(t))
	w := newWorld(t, e)
	importNumbered(t, e, w, 5001, listings)
	db, err := pgx.Connect(context.Background(), pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	// Each gateway reaches Redis through a proxy of its own, slow once the
	// import is applied, so that whichever consumes takes its time.
	var (
		envs [2]environment
		slow [2]*faultproxy.Proxy
		gws  [2]*process
	)
	for i := range gws {
		slow[i] = faultproxy.New(t, testenv.RedisAddr(t))
		envs[i] = maps.Clone(e)
		envs[i]["GATEWAY_REDIS_URL"] = "redis://" + slow[i].Addr() + "/0"
		envs[i]["GATEWAY_REDIS_TIMEOUT"] = "2s" // slow, not failing
		envs[i]["GATEWAY_FEED_BATCH"] = strconv.Itoa(batch)
		gws[i] = start(t, envs[i])
		if i == 0 {
			eventually(t, "the first gateway consumes", func() bool { s, ok := gws[0].feedStats(); return ok && s.Feed.Consumer })
		}
	}
	eventually(t, "the import applied", func() bool { return unapplied(t, db) == 0 })
	primeByID(t, gws[1], gws[1].token(t, w.otpLogin()), 5001, listings)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer rdb.Close()
	requireByIDAt(t, db, rdb, prefix, 5001, listings)
	for _, p := range slow {
		p.SetLatency(300 * time.Millisecond)
	}

	for round := 1; ; round++ {
		if round > attempts {
			t.Fatalf("in %d rounds the consumer was never killed in the middle of the changes", attempts)
		}
		if done := killMidBatch(t, db, gws[:], envs[:], round, batch, listings); done {
			requireByIDAt(t, db, rdb, prefix, 5001, listings) // no change lost
			requireRedisMatchesStore(t, db, rdb, prefix)
			return
		}
	}
}

// killMidBatch runs one round of TestEndToEndFeedConsumerKilledMidBatch:
// it writes version round of the listings, kills the gateway that
// consumes once it has applied a batch of them, and checks the takeover.
// It reports false, having replaced the killed gateway in gws, when the
// round did not arrange what the test is about.
func killMidBatch(t *testing.T, db *pgx.Conn, gws []*process, envs []environment, round, batch, listings int) bool {
	t.Helper()
	ctx := context.Background()
	var from int64 // the round's changes follow it
	if err := db.QueryRow(ctx, `SELECT COALESCE(max(seq), 0) FROM listing_changes`).Scan(&from); err != nil {
		t.Fatal(err)
	}
	roundLeft := func() int64 {
		var n int64
		if err := db.QueryRow(ctx, `SELECT count(*) FROM listing_changes WHERE seq > $1 AND applied_at IS NULL`, from).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	applied := make([]uint64, len(gws))
	for i, p := range gws {
		applied[i] = p.Stats(t).Feed.Applied
	}
	if _, err := db.Exec(ctx, `UPDATE listings SET document = replace(document, $1, $2) WHERE id BETWEEN 5001 AND $3`,
		fmt.Sprintf(`"title":"v%d"`, round-1), fmt.Sprintf(`"title":"v%d"`, round), 5000+listings); err != nil {
		t.Fatal(err)
	}

	victim := -1
	eventually(t, "a consumer applied its first batch", func() bool {
		for i, p := range gws {
			if s, ok := p.feedStats(); ok && s.Feed.Consumer && s.Feed.Applied >= applied[i]+uint64(batch) {
				victim = i
				return true
			}
		}
		return roundLeft() == 0 // the role moved meanwhile, and the batches with it
	})
	if victim < 0 {
		t.Logf("round %d: every change was applied before a consumer could be killed; again", round)
		return false
	}
	survivor := gws[1-victim]
	survivorApplied := survivor.Stats(t).Feed.Applied
	startedBefore := len(logTimes(t, survivor, "change feed consumer started"))
	if err := gws[victim].Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = gws[victim].Wait()
	took := eventually(t, "the survivor takes over", func() bool { s, ok := survivor.feedStats(); return ok && s.Feed.Consumer })
	drained := eventually(t, "the backlog drains", func() bool { return unapplied(t, db) == 0 })
	starts := logTimes(t, survivor, "change feed consumer started")
	again := func(why string, args ...any) bool {
		t.Logf("round %d: "+why+"; again", append([]any{round}, args...)...)
		gws[victim] = start(t, envs[victim])
		return false
	}

	// Who marked what: the victim's marks precede the survivor's start,
	// since the survivor acquired the feed only once the victim's session
	// had ended.
	if len(starts) != startedBefore+1 || starts[len(starts)-1].Before(killed) {
		return again("the survivor did not take over from the killed consumer (consumer starts %v, killed at %v)",
			starts[startedBefore:], killed.Format(time.StampMilli))
	}
	takeover := starts[len(starts)-1]
	var byVictim, bySurvivor, total int64
	if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE applied_at < $2), count(*) FILTER (WHERE applied_at >= $2), count(*)
		FROM listing_changes WHERE seq > $1`, from, takeover.UnixMilli()).Scan(&byVictim, &bySurvivor, &total); err != nil {
		t.Fatal(err)
	}
	if bySurvivor == 0 {
		return again("the killed consumer had applied all %d changes; nothing was taken over", byVictim)
	}
	t.Logf("round %d: gateway %d killed with %d of %d changes applied; the other took over in %v and applied the other %d within %v",
		round, victim, byVictim, total, took, bySurvivor, drained)
	if total != int64(listings) || byVictim < int64(batch) || byVictim+bySurvivor != total {
		t.Fatalf("%d changes recorded, %d applied by the killed consumer, %d by the survivor; want %d, at least one batch (%d) by the killed one, all applied",
			total, byVictim, bySurvivor, listings, batch)
	}
	if got := survivor.Stats(t).Feed.Applied - survivorApplied; got != uint64(bySurvivor) {
		t.Fatalf("the survivor marked %d changes applied; want the %d the killed consumer left, none twice", got, bySurvivor)
	}
	return true
}

// TestEndToEndFeedSilentPartition: the consumer's connections to
// PostgreSQL stop passing bytes without closing. Another gateway takes
// over (the server ends the silent session after partitionTakeover; the
// test waits that plus its patience), and only after the first stopped
// applying.
func TestEndToEndFeedSilentPartition(t *testing.T) {
	pgURL := testenv.PostgresURL(t)
	e, _ := postgresEnv(t, pgURL, testenv.RedisAddr(t))
	w := newWorld(t, e)
	db, err := pgx.Connect(context.Background(), pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	frozen := faultproxy.New(t, "127.0.0.1:5432")
	t.Cleanup(frozen.Thaw)
	eA := maps.Clone(e)
	eA["GATEWAY_STORE_URL"] = strings.Replace(pgURL, "127.0.0.1:5432", frozen.Addr(), 1)
	a := start(t, eA)
	eventually(t, "gateway A consumes", func() bool { s, ok := a.feedStats(); return ok && s.Feed.Consumer })
	b := start(t, maps.Clone(e))
	tok := b.token(t, w.otpLogin())
	if got := titleOf(t, b.view(t, "/realty/1001", tok)); got != "Sea view" {
		t.Fatalf("title %q", got)
	}

	frozen.Freeze()
	frozenAt := time.Now()
	if _, err := db.Exec(context.Background(), `UPDATE listings SET document = replace(document, '"title":"Sea view"', '"title":"Changed in the partition"') WHERE id = 1001`); err != nil {
		t.Fatal(err)
	}
	took := within(t, partitionTakeover+testenv.Patience(), "B takes over", func() bool { s, ok := b.feedStats(); return ok && s.Feed.Consumer })
	eventually(t, "B applies the change", func() bool { return titleOf(t, b.view(t, "/realty/1001", tok)) == "Changed in the partition" })
	stopped, okA := logTime(t, a, "change feed consumer stopped")
	started, okB := logTime(t, b, "change feed consumer started")
	if !okA || !okB || !stopped.Before(started) {
		t.Fatalf("A stopped at %v (%v), B started at %v (%v); want A to stop first", stopped, okA, started, okB)
	}
	if s, ok := a.feedStats(); !ok || s.Feed.Consumer {
		t.Fatalf("A still says it consumes: %+v", s.Feed)
	}
	t.Logf("B took over %v after the freeze; A stopped applying %v after it, %v before B started",
		took, stopped.Sub(frozenAt), started.Sub(stopped))
}

// TestEndToEndFeedPostgresRestart: PostgreSQL restarted (pg_ctl restart -m
// fast) while gateways read and another writer writes; the feed resumes
// and leaves no stale key.
func TestEndToEndFeedPostgresRestart(t *testing.T) {
	pg := testenv.StartPostgres(t)
	e, prefix := postgresEnv(t, pg.URL, testenv.RedisAddr(t))
	w := newWorld(t, e)
	importNumbered(t, e, w, 5001, 50)
	gws := []*process{start(t, maps.Clone(e)), start(t, maps.Clone(e))}
	tok := gws[0].token(t, w.otpLogin())

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var writes, writeErrs atomic.Int64
	wg.Go(func() { // the listing application, reconnecting when the server went away
		var db *pgx.Conn
		defer func() {
			if db != nil {
				db.Close(context.Background())
			}
		}()
		for v := 1; ctx.Err() == nil; v++ {
			if db == nil {
				c, err := pgx.Connect(ctx, pg.URL)
				if err != nil {
					writeErrs.Add(1)
					time.Sleep(50 * time.Millisecond)
					continue
				}
				db = c
			}
			id := 5001 + rand.IntN(50)
			_, err := db.Exec(ctx, `UPDATE listings SET document = regexp_replace(document, '"title":"[^"]*"', $1) WHERE id = $2`,
				fmt.Sprintf(`"title":"w%d"`, v), id)
			if err != nil {
				writeErrs.Add(1)
				db.Close(context.Background())
				db = nil
				continue
			}
			writes.Add(1)
			time.Sleep(10 * time.Millisecond)
		}
	})
	for _, p := range gws {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/realty/%d", p.Base, 5001+rand.IntN(50)), nil)
				req.Header.Set("Authorization", "Bearer "+tok)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}
		})
	}
	time.Sleep(time.Second)
	pg.Restart()
	restarted := writes.Load()
	time.Sleep(2 * time.Second)
	stop()
	wg.Wait()
	if writes.Load() <= restarted {
		t.Fatalf("no write after the restart (%d before it, %d errors)", restarted, writeErrs.Load())
	}
	db, err := pgx.Connect(context.Background(), pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	eventually(t, "the feed catches up", func() bool { return unapplied(t, db) == 0 })
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer rdb.Close()
	requireRedisMatchesStore(t, db, rdb, prefix)
	// A Redis timeout under load (CI's race detector) distrusts Redis
	// until the gateway has verified the feed again, a few hundred ms.
	for _, p := range gws {
		eventually(t, p.Base+" trusts Redis again", func() bool { return p.Stats(t).Cache.RedisTrusted })
	}
	t.Logf("%d writes (%d failed around the restart)", writes.Load(), writeErrs.Load())
}

// TestEndToEndFeedRedisRestarts: Redis comes back empty, and Redis comes
// back from a snapshot older than writes that returned (through a gateway,
// and in SQL): no answer is older than those writes.
func TestEndToEndFeedRedisRestarts(t *testing.T) {
	for _, snapshot := range []bool{false, true} {
		name := "empty"
		if snapshot {
			name = "older snapshot"
		}
		t.Run(name, func(t *testing.T) {
			node := testenv.StartRedis(t, "redis", "--dbfilename", "dump.rdb")
			pgURL := testenv.PostgresURL(t)
			e, _ := postgresEnv(t, pgURL, node.Addr)
			// A consumer that takes its time to notice the new Redis: reads
			// must not meet the old snapshot meanwhile.
			e["GATEWAY_FEED_POLL"] = "1s"
			w := newWorld(t, e)
			db, err := pgx.Connect(context.Background(), pgURL)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close(context.Background())
			gws := []*process{start(t, maps.Clone(e)), start(t, maps.Clone(e))}
			tok := gws[0].token(t, w.passwordLogin())
			paths := []string{"/realty/1001", fmt.Sprintf("/realty/%d-7", w.firm)}
			var thirdNo int64
			if err := db.QueryRow(context.Background(), `SELECT no FROM listings WHERE document LIKE '%"title":"Third"%'`).Scan(&thirdNo); err != nil {
				t.Fatal(err)
			}
			third := fmt.Sprintf("/realty/%d-%d", w.firm, thirdNo) // "Third", written in SQL
			for _, p := range gws {
				for _, path := range append(paths, third) {
					p.view(t, path, tok)
				}
			}
			rdb := redis.NewClient(&redis.Options{Addr: node.Addr, MaxRetries: -1})
			defer rdb.Close()
			eventually(t, "the import applied", func() bool { return unapplied(t, db) == 0 })
			if snapshot {
				if err := rdb.Save(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(filepath.Join(node.Dir, "dump.rdb"))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(node.Dir, "old.rdb"), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			put(t, gws[0], paths[0], tok, 2)
			if _, err := db.Exec(context.Background(), `UPDATE listings SET document = replace(document, '"title":"Third"', '"title":"Third, v2"') WHERE no = $1`, thirdNo); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the SQL write applied", func() bool { return unapplied(t, db) == 0 })
			for _, p := range gws { // both hold the new versions, in Redis and locally
				if titleOf(t, p.view(t, paths[1], tok)) != "v2" || titleOf(t, p.view(t, third, tok)) != "Third, v2" {
					t.Fatal("new versions not served before the restart")
				}
			}

			node.Kill()
			if snapshot {
				b, err := os.ReadFile(filepath.Join(node.Dir, "old.rdb"))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(node.Dir, "dump.rdb"), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			node.Restart()
			if n, err := rdb.DBSize(context.Background()).Result(); err != nil || (n == 0) == snapshot {
				t.Fatalf("Redis after the restart holds %d keys (%v); snapshot %v", n, err, snapshot)
			}
			// Read without a pause from the moment Redis is back.
			until := time.Now().Add(3 * time.Second)
			reads := 0
			for time.Now().Before(until) {
				for _, p := range gws {
					for _, path := range paths {
						if got := titleOf(t, p.view(t, path, tok)); got != "v2" {
							t.Fatalf("%s on %s after the restart: %q; want v2", path, p.Base, got)
						}
					}
					if got := titleOf(t, p.view(t, third, tok)); got != "Third, v2" {
						t.Fatalf("%s on %s after the restart: %q; want Third, v2", third, p.Base, got)
					}
					reads += 3
				}
			}
			eventually(t, "the replay applied", func() bool { return unapplied(t, db) == 0 })
			requireRedisMatchesStore(t, db, rdb, e["GATEWAY_REDIS_PREFIX"])
			var replayed uint64
			for _, p := range gws {
				replayed += p.Stats(t).Feed.Replayed
			}
			t.Logf("%d reads after the restart, none old; %d changes replayed", reads, replayed)
			if snapshot && replayed == 0 {
				t.Fatal("an older snapshot came back and nothing was replayed")
			}
		})
	}
}

// TestEndToEndFeedSentinelFailover: a primary, a replica and three
// sentinels; two gateways in sentinel mode; readers on both gateways and a
// writer on each (each writer its own listing, every 50 ms); the primary
// is killed with SIGKILL. No read returns a version older than the last
// write that returned before it was sent, and no write is lost; 10 runs.
func TestEndToEndFeedSentinelFailover(t *testing.T) {
	const runs = 10
	var stale, reads, writes, failedReads, failedWrites atomic.Int64
	for run := range runs {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			s := testenv.RedisSentinels(t, 3)
			pgURL := testenv.PostgresURL(t)
			e, _ := postgresEnv(t, pgURL, testenv.RedisAddr(t))
			e["GATEWAY_REDIS_MODE"] = "sentinel" // postgresEnv's invalidation wait: the test's patience
			e["GATEWAY_REDIS_URL"] = fmt.Sprintf("redis://%s?master_name=%s&addr=%s&addr=%s", s.Addrs[0], s.MasterName, s.Addrs[1], s.Addrs[2])
			w := newWorld(t, e)
			importNumbered(t, e, w, 5001, 2)
			gws := []*process{start(t, maps.Clone(e)), start(t, maps.Clone(e))}
			tok := gws[0].token(t, w.passwordLogin())
			for _, p := range gws {
				testenv.WaitFor(t, func() bool { st, ok := p.feedStats(); return ok && st.Cache.RedisTrusted })
			}

			type event struct {
				at      time.Time
				version int
			}
			var mu sync.Mutex
			returned := map[int64][]event{} // by listing: writes that returned
			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for i, p := range gws {
				id := int64(5001 + i)
				wg.Go(func() {
					for v := 1; ctx.Err() == nil; v++ {
						r, err := send(p, http.MethodPut, fmt.Sprintf("/realty/%d", id), tok,
							fmt.Sprintf(`{"title":"v%d","categoryId":1,"location":{"cityId":6}}`, v))
						if err != nil || r.status != http.StatusOK {
							failedWrites.Add(1)
							t.Errorf("PUT v%d of %d: %v %d %s", v, id, err, r.status, r.body)
							return
						}
						mu.Lock()
						returned[id] = append(returned[id], event{time.Now(), v})
						mu.Unlock()
						writes.Add(1)
						time.Sleep(50 * time.Millisecond)
					}
				})
			}
			for _, p := range gws {
				for range 4 {
					wg.Go(func() {
						for ctx.Err() == nil {
							id := int64(5001 + rand.IntN(2))
							path := fmt.Sprintf("/realty/%d", id)
							if rand.IntN(2) == 0 {
								path = fmt.Sprintf("/realty/%d-%d", w.firm, 1001+id-5001)
							}
							sent := time.Now()
							mu.Lock()
							want := 0
							for _, ev := range returned[id] {
								if ev.at.Before(sent) {
									want = max(want, ev.version)
								}
							}
							mu.Unlock()
							r, err := send(p, http.MethodGet, path, tok, "")
							if err != nil || r.status != http.StatusOK {
								failedReads.Add(1)
								continue
							}
							reads.Add(1)
							var l struct{ Title string }
							_ = json.Unmarshal(r.body, &l)
							got, _ := strconv.Atoi(strings.TrimPrefix(l.Title, "v"))
							if got < want {
								stale.Add(1)
								t.Errorf("%s on %s sent %s: v%d (%s), after v%d returned",
									path, p.Base, sent.Format("15:04:05.000"), got, r.header.Get("X-Cache"), want)
							}
						}
					})
				}
			}
			time.Sleep(1500 * time.Millisecond)
			s.MasterNode.Kill()
			sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
			defer sc.Close()
			// The sentinels elect a leader to promote the replica; an
			// election whose votes split is tried again only after twice
			// the failover-timeout (10 s), and a busy machine splits more
			// than one: Redis's pace, not the gateway's, so three
			// patiences.
			within(t, 3*testenv.Patience(), "the replica is promoted", func() bool {
				addr, err := sc.GetMasterAddrByName(context.Background(), s.MasterName).Result()
				return err == nil && addr[0]+":"+addr[1] == s.Replica
			})
			time.Sleep(3 * time.Second)
			stop()
			wg.Wait()
			for id, evs := range returned { // no write lost
				if len(evs) == 0 {
					continue
				}
				last := evs[len(evs)-1].version
				if got := titleOf(t, gws[1].view(t, fmt.Sprintf("/realty/%d", id), tok)); got != fmt.Sprintf("v%d", last) {
					t.Fatalf("listing %d reads %q after the run; the last write that returned was v%d", id, got, last)
				}
			}
		})
	}
	t.Logf("%d runs: %d reads (%d failed), %d writes (%d failed), %d older than a returned write",
		runs, reads.Load(), failedReads.Load(), writes.Load(), failedWrites.Load(), stale.Load())
}
