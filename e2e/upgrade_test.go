package e2e

// A rolling upgrade: the release before this work on the cache's Redis
// records (floors, leases, scripts) runs beside this build on one
// PostgreSQL and one Redis, under reads and writes (docs/operating.md,
// "Upgrading").

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/realty-gateway/gateway/internal/gatewaytest"
	"github.com/realty-gateway/gateway/internal/testenv"
)

// upgradeFrom is the release that TestEndToEndRollingUpgrade runs beside
// this build: the last one before issue 41 changed what lives in Redis.
const upgradeFrom = "65008c9"

// offline matches the go command's answer where no module can be fetched.
var offline = regexp.MustCompile(`module lookup disabled|dial tcp|no such host`)

// readVersion reads path through p and returns the version its title
// names ("v<n>"), or what was wrong with the answer: not 200, another
// listing than id, or another title.
func readVersion(p *process, path, tok string, id int64) (int64, response, string) {
	r, err := send(p, http.MethodGet, path, tok, "")
	var l struct {
		ID    int64  `json:"id"`
		Title string `json:"title"`
	}
	if err != nil || r.status != http.StatusOK || json.Unmarshal(r.body, &l) != nil || l.ID != id {
		return 0, r, fmt.Sprintf("%d %v %.200s", r.status, err, r.body)
	}
	var v int64
	if n, err := fmt.Sscanf(l.Title, "v%d", &v); n != 1 || err != nil || fmt.Sprintf("v%d", v) != l.Title {
		return 0, r, fmt.Sprintf("title %q", l.Title)
	}
	return v, r, ""
}

// writeSQLVersion titles listing id "v<v>" in place of "v<v-1>" by an
// UPDATE in SQL behind the gateways, and returns once the change feed
// has applied it: from then on no read may show an older version.
func writeSQLVersion(ctx context.Context, conn *pgx.Conn, id int64, v int) error {
	var rev, seq int64
	if err := conn.QueryRow(ctx, `UPDATE listings SET document = replace(document, $1, $2) WHERE id = $3 RETURNING revision`,
		fmt.Sprintf(`"title":"v%d"`, v-1), fmt.Sprintf(`"title":"v%d"`, v), id).Scan(&rev); err != nil {
		return fmt.Errorf("UPDATE v%d of %d: %w", v, id, err)
	}
	if err := conn.QueryRow(ctx, `SELECT seq FROM listing_changes WHERE listing_id = $1 AND revision = $2`, id, rev).Scan(&seq); err != nil {
		return fmt.Errorf("the change of v%d of %d: %w", v, id, err)
	}
	for began := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		var applied bool
		if err := conn.QueryRow(ctx, `SELECT applied_at IS NOT NULL FROM listing_changes WHERE seq = $1`, seq).Scan(&applied); err != nil {
			return err
		}
		if applied {
			return nil
		}
		if time.Since(began) > testenv.Patience() {
			return fmt.Errorf("SQL v%d of %d not applied by the feed within %v", v, id, testenv.Patience())
		}
	}
}

// buildRelease builds rev's gateway from the repository's history into
// the test's temporary directory. It skips the test where the clone does
// not hold rev (a shallow clone), saying so.
func buildRelease(t *testing.T, rev string) string {
	t.Helper()
	root, err := gatewaytest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("git", "-C", root, "cat-file", "-e", rev+"^{commit}").Run(); err != nil {
		t.Skipf("%s is not in this clone's history (a shallow clone?): %v", rev, err)
	}
	src := filepath.Join(t.TempDir(), "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, rev, src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", rev, err, out)
	}
	bin := filepath.Join(t.TempDir(), "gateway-"+rev)
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		if offline.Match(out) { // rev needs modules this build does not, and none can be fetched
			t.Skipf("go build %s: its modules cannot be fetched here: %s", rev, out)
		}
		t.Fatalf("go build %s: %v\n%s", rev, err, out)
	}
	return bin
}

// TestEndToEndRollingUpgrade runs upgradeFrom's gateway, then this build's
// beside it, as an operator's rolling upgrade does: the release starts on
// its own schema, this build's admin commands migrate the database while
// it runs, and this build's gateway joins it on the same PostgreSQL and
// Redis key prefix. Four readers per gateway read 20 listings in both
// forms, while the first 6 are written 6 times each, by PUT through each
// gateway in turn and by UPDATE in SQL behind them, which the release's
// change feed consumer (the first to start holds the feed) applies.
// Every read answers 200, and none sent after a write was acknowledged
// (the PUT returned; the feed marked the UPDATE applied) shows an older
// version, on either gateway, in either form.
func TestEndToEndRollingUpgrade(t *testing.T) {
	const (
		listings, written, versions = 20, 6, 6
		readers                     = 4 // per gateway
	)
	release := buildRelease(t, upgradeFrom)
	pgURL := testenv.PostgresURL(t)
	e, _ := postgresEnv(t, pgURL, testenv.RedisAddr(t))
	e["GATEWAY_REDIS_TIMEOUT"] = "1s" // a starved machine's round trip: not what this is about
	old := &process{gatewaytest.Start(t, release, maps.Clone(e))}
	w := newWorld(t, e) // this build's admin commands: its schema steps run now
	importNumbered(t, e, w, burstFirstID, listings)
	ne := maps.Clone(e)
	ne["GATEWAY_DATA_DIR"] = t.TempDir()
	ps := []*process{old, start(t, ne)}
	tok := ps[1].token(t, w.otpLogin())

	db, err := pgx.Connect(context.Background(), pgURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	eventually(t, "the release's feed consumer applies the import", func() bool { return unapplied(t, db) == 0 })

	paths := func(i int) [2]string {
		return [2]string{fmt.Sprintf("/realty/%d", burstFirstID+i), fmt.Sprintf("/realty/%d-%d", w.firm, 1001+i)}
	}
	var (
		floor    [written]atomic.Int64
		seen     [2][written][2]atomic.Int64
		answered atomic.Int64
		mu       sync.Mutex
		bad      []string
	)
	report := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(bad) < 10 {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
	}
	read := func(g, i, form int) {
		var least, viewLeast int64
		if i < written {
			least, viewLeast = floor[i].Load(), seen[g][i][form].Load()
		}
		path := paths(i)[form]
		v, _, problem := readVersion(ps[g], path, tok, int64(burstFirstID+i))
		answered.Add(1)
		if problem != "" {
			report("%s on gateway %d: %s", path, g, problem)
			return
		}
		switch {
		case i >= written && v != 0:
			report("%s on gateway %d: unwritten, shows v%d", path, g, v)
		case i < written && v < least:
			report("%s on gateway %d, sent after v%d was acknowledged, shows v%d", path, g, least, v)
		case i < written && v < viewLeast:
			report("%s on gateway %d, sent after that view showed v%d, shows v%d", path, g, viewLeast, v)
		}
		if i < written {
			for cur := seen[g][i][form].Load(); v > cur && !seen[g][i][form].CompareAndSwap(cur, v); cur = seen[g][i][form].Load() {
			}
		}
	}
	// write writes version v of listing i and returns once a reader must
	// see it: by PUT through gateway v%2 (by id, then by number), or by
	// UPDATE in SQL, acknowledged once the feed marked it applied.
	write := func(i, v int) error {
		ctx := context.Background()
		if (i+v)%2 == 1 {
			g, path := v%2, paths(i)[(v/2)%2]
			r, err := send(ps[g], http.MethodPut, path, tok, fmt.Sprintf(`{"title":"v%d","categoryId":1,"location":{"cityId":6}}`, v))
			if err != nil || r.status != http.StatusOK {
				return fmt.Errorf("PUT v%d %s on gateway %d: %v %d %.200s", v, path, g, err, r.status, r.body)
			}
			return nil
		}
		conn, err := pgx.Connect(ctx, pgURL)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		return writeSQLVersion(ctx, conn, burstFirstID+int64(i), v)
	}

	done := make(chan struct{})
	var rs sync.WaitGroup
	for g := range ps {
		for c := range readers {
			rs.Go(func() {
				for n := 0; ; n++ {
					select {
					case <-done:
						return
					default:
					}
					i := (c*7 + n) % listings
					read(g, i, (c+n)%2)
				}
			})
		}
	}
	var ws sync.WaitGroup
	errs := make(chan error, written)
	for i := range written {
		ws.Go(func() {
			for v := 1; v <= versions; v++ {
				if err := write(i, v); err != nil {
					errs <- err
					return
				}
				for cur := floor[i].Load(); int64(v) > cur && !floor[i].CompareAndSwap(cur, int64(v)); cur = floor[i].Load() {
				}
				time.Sleep(50 * time.Millisecond) // readers read each version
			}
		})
	}
	ws.Wait()
	close(errs)
	time.Sleep(500 * time.Millisecond) // reads after the last write
	close(done)
	rs.Wait()
	for err := range errs {
		t.Error(err)
	}
	for _, b := range bad {
		t.Error(b)
	}
	if n := answered.Load(); n < 100 {
		t.Errorf("only %d reads answered", n)
	}
	t.Logf("%d reads on %s and this build, %d writes", answered.Load(), upgradeFrom, written*versions)
}
