package postgres_test

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/upstream"
	"github.com/realty-gateway/gateway/upstream/internal/sqlstore"
	"github.com/realty-gateway/gateway/upstream/postgres"
	"github.com/realty-gateway/gateway/upstream/storetest"
)

// open returns a store on a fresh database. Its Close is registered after
// the database's drop, so it runs first.
func open(t *testing.T) upstream.Store {
	t.Helper()
	url := testenv.PostgresURL(t)
	s, err := postgres.Open(context.Background(), url, postgres.Options{MaxConns: 4})
	return storetest.Opened(t, s, err)
}

func TestStore(t *testing.T) {
	storetest.Run(t, open)
}

func TestFeed(t *testing.T) {
	storetest.RunFeed(t, func(t *testing.T) (storetest.FeedStore, storetest.Exec) {
		url := testenv.PostgresURL(t)
		s, err := postgres.Open(context.Background(), url, postgres.Options{MaxConns: 4})
		conn := connect(t, url)
		return storetest.Opened(t, s, err), func(ctx context.Context, stmt string, args ...any) error {
			_, err := conn.Exec(ctx, stmt, args...)
			return err
		}
	})
}

// schemaVersions are the versions a database this build has opened records:
// one for each step in migrations/.
var schemaVersions = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}

// connect opens a connection to the database at url, beside any store
// open on it, and closes it when the test ends.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	storetest.CloseAtEnd(t, "connection", func() error { return conn.Close(context.Background()) })
	return conn
}

// consumer opens a store on the database at url and holds its change
// feed until the test ends.
func consumer(t *testing.T, url string) (upstream.Feed, upstream.FeedSession) {
	t.Helper()
	s, err := postgres.Open(context.Background(), url, postgres.Options{MaxConns: 4})
	var feed upstream.Feed = storetest.Opened(t, s, err)
	sess, err := feed.Acquire(context.Background(), "the consumer")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close(context.Background()) })
	return feed, sess
}

func TestNumberConstraint(t *testing.T) {
	url := testenv.PostgresURL(t)
	s, err := postgres.Open(context.Background(), url, postgres.Options{MaxConns: 2})
	storetest.CheckNumberConstraint(t, storetest.Opened(t, s, err), connect(t, url).Exec)
}

// TestOpenConcurrently starts several stores on one database at once: the
// advisory lock keeps their migrations from racing.
func TestOpenConcurrently(t *testing.T) {
	url := testenv.PostgresURL(t)
	const stores = 4
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range stores {
		wg.Go(func() {
			s, err := postgres.Open(context.Background(), url, postgres.Options{MaxConns: 1})
			if err == nil {
				err = s.Close()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Errorf("Open: %v", err)
	}
}

// execAll runs statements on the database at url, outside any store.
func execAll(t *testing.T, url string, stmts ...string) {
	t.Helper()
	conn := connect(t, url)
	for _, stmt := range stmts {
		if _, err := conn.Exec(context.Background(), stmt); err != nil {
			t.Fatalf("exec: %v", err)
		}
	}
}

// recordedVersions lists the versions recorded in schema_version.
func recordedVersions(t *testing.T, url string) []int {
	t.Helper()
	rows, err := connect(t, url).Query(context.Background(), `SELECT version FROM schema_version ORDER BY version`)
	if err != nil {
		t.Fatalf("read schema_version: %v", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatalf("read schema_version: %v", err)
	}
	return versions
}

// upgradeAndReopen opens the old database at url, which upgrades it, runs
// upgraded, closes it and checks that every step is recorded; then it
// opens it again, which must apply nothing, and runs reopened on the store
// it returns (closed at the end of the test).
func upgradeAndReopen(t *testing.T, url string, upgraded, reopened func(*testing.T, upstream.Store)) upstream.Store {
	t.Helper()
	ctx := context.Background()
	s, err := postgres.Open(ctx, url, postgres.Options{MaxConns: 2})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	upgraded(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := recordedVersions(t, url); !reflect.DeepEqual(got, schemaVersions) {
		t.Fatalf("schema_version after the upgrade = %v; want %v", got, schemaVersions)
	}
	s, err = postgres.Open(ctx, url, postgres.Options{MaxConns: 2})
	opened := storetest.Opened(t, s, err)
	reopened(t, opened)
	if got := recordedVersions(t, url); !reflect.DeepEqual(got, schemaVersions) {
		t.Fatalf("schema_version after reopening = %v; want %v", got, schemaVersions)
	}
	return opened
}

// TestUpgradeUnversioned opens a database made by the release before schema
// versioning (its schema.sql, no schema_version) that holds a listing, and
// checks that the listing survives and can be deleted.
func TestUpgradeUnversioned(t *testing.T) {
	url := testenv.PostgresURL(t)
	oldSchema, err := os.ReadFile("testdata/schema_v1.sql")
	if err != nil {
		t.Fatal(err)
	}
	_, doc := storetest.UpgradedListing(t)
	execAll(t, url,
		string(oldSchema),
		`INSERT INTO firms (id, name, key_digest) VALUES (1, 'Firm A', '\x01')`,
		`INSERT INTO firm_users (id, firm_id, email) VALUES (1, 1, 'alice@example.com')`,
		`INSERT INTO listings (id, firm_id, no, firm_user_id, is_active, revision, document)
		 VALUES (7, 1, 3, 1, false, 1, '`+doc+`')`,
	)

	// Reopening applies nothing and keeps the tombstone.
	s := upgradeAndReopen(t, url, storetest.CheckUpgraded, storetest.CheckReopened)

	// The rows above were written with explicit ids, which identity
	// columns do not count; an old database's own rows were counted.
	execAll(t, url,
		`SELECT setval(pg_get_serial_sequence('firms', 'id'), (SELECT max(id) FROM firms))`,
		`SELECT setval(pg_get_serial_sequence('firm_users', 'id'), (SELECT max(id) FROM firm_users))`)
	storetest.CheckNumberConstraint(t, s, connect(t, url).Exec)
}

// TestUpgradeFromVersion3 opens a database made by the release before
// disabled users (steps 1 to 3 of migrations/, recorded in schema_version)
// that holds a firm, its users and a listing, and checks the upgrade to this
// build's version: the data survives, the users are enabled, a user can be
// disabled and the firm's key rotated, and both stay so after reopening.
func TestUpgradeFromVersion3(t *testing.T) {
	url := testenv.PostgresURL(t)
	steps, err := sqlstore.LoadSteps(os.DirFS("."), "migrations")
	if err != nil {
		t.Fatal(err)
	}
	_, doc := storetest.UpgradedListing(t)
	old := storetest.VersionBeforeDisabledUsers
	stmts := slices.Clone(steps[:old])
	stmts = append(stmts,
		`CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`)
	for v := 1; v <= old; v++ {
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO schema_version (version) VALUES (%d)`, v))
	}
	execAll(t, url, append(stmts,
		`INSERT INTO firms (id, name, key_digest) VALUES (1, 'Firm A', '\x01')`,
		`INSERT INTO firm_users (id, firm_id, email, password_hash)
		 VALUES (1, 1, 'alice@example.com', 'hash-a'), (2, 1, 'otp@example.com', '')`,
		`INSERT INTO listings (id, firm_id, no, firm_user_id, is_active, revision, document)
		 VALUES (7, 1, 3, 1, false, 1, '`+doc+`')`,
	)...)
	if got := recordedVersions(t, url); !reflect.DeepEqual(got, schemaVersions[:old]) {
		t.Fatalf("schema_version of the old database = %v; want %v", got, schemaVersions[:old])
	}

	upgradeAndReopen(t, url,
		func(t *testing.T, s upstream.Store) {
			storetest.CheckUpgraded(t, s)
			storetest.CheckUpgradedAccounts(t, s)
		},
		func(t *testing.T, s upstream.Store) {
			storetest.CheckReopened(t, s)
			storetest.CheckAccountsReopened(t, s)
		})
}

func TestNewDatabaseVersion(t *testing.T) {
	url := testenv.PostgresURL(t)
	s, err := postgres.Open(context.Background(), url, postgres.Options{MaxConns: 1})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := recordedVersions(t, url); !reflect.DeepEqual(got, schemaVersions) {
		t.Fatalf("schema_version of a new database = %v; want %v", got, schemaVersions)
	}
}

func TestOpenNewerSchema(t *testing.T) {
	url := testenv.PostgresURL(t)
	execAll(t, url,
		`CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`,
		`INSERT INTO schema_version (version) VALUES (99)`)
	s, err := postgres.Open(context.Background(), url, postgres.Options{MaxConns: 1})
	if err == nil {
		t.Fatalf("Open of a database at schema version 99 succeeded (Close: %v); want an error", s.Close())
	}
	if !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Open error = %v; want it to say the schema is newer", err)
	}
}

// TestFeedTriggerForAnyWriter: the listing application's role, granted its
// rights on listings and nothing of the feed's, writes with an empty
// search_path, and its writes are recorded: the trigger runs as its owner
// and names every table, function and operator by its schema.
func TestFeedTriggerForAnyWriter(t *testing.T) {
	ctx := context.Background()
	url := testenv.PostgresURL(t)
	s, err := postgres.Open(ctx, url, postgres.Options{MaxConns: 2})
	s = storetest.Opened(t, s, err)
	stored := storetest.ImportOne(t, s, upstream.Listing{Title: "Flat", IsActive: true})
	owner := connect(t, url)
	role := testenv.RandomName("listing_app_")
	for _, stmt := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE ON SCHEMA public TO " + role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON listings TO " + role,
	} {
		if _, err := owner.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		_, _ = owner.Exec(context.Background(), "REVOKE ALL ON listings FROM "+role)
		_, _ = owner.Exec(context.Background(), "REVOKE ALL ON SCHEMA public FROM "+role)
		_, _ = owner.Exec(context.Background(), "DROP ROLE "+role)
	})
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = role
	app, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(ctx)
	for _, stmt := range []string{
		`SET search_path = ''`,
		`UPDATE public.listings SET document = replace(document, '"title":"Flat"', '"title":"By the app"') WHERE id = ` + fmt.Sprint(stored.ID),
		`DELETE FROM public.listings WHERE id = ` + fmt.Sprint(stored.ID),
	} {
		if _, err := app.Exec(ctx, stmt); err != nil {
			t.Fatalf("as %s: %s: %v", role, stmt, err)
		}
	}
	p, err := s.Position(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := s.Unapplied(ctx, p.LastSeq, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 3 || cs[1].Revision != 2 || !cs[2].Deleted || cs[2].Revision != 3 {
		t.Fatalf("changes %+v; want the import, the app's update (revision 2) and its delete (3)", cs)
	}
}

func BenchmarkRead(b *testing.B) {
	s, err := postgres.Open(context.Background(), testenv.PostgresURL(b), postgres.Options{MaxConns: 4})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.BenchRead(b, s)
}

// An import keeps each listing's bytes once, and reads serve them.
func TestImportKeepsOneCopy(t *testing.T) {
	url := testenv.PostgresURL(t)
	s, err := postgres.Open(context.Background(), url, postgres.Options{MaxConns: 2})
	s = storetest.Opened(t, s, err)
	conn := connect(t, url)
	storetest.RequireImportKeepsOneCopy(t, s, func(id int64) (c storetest.RowCopies) {
		err := conn.QueryRow(context.Background(), `SELECT body IS NOT NULL, document_body_revision, revision FROM listings WHERE id = $1`,
			id).Scan(&c.Body, &c.DocumentBodyRevision, &c.Revision)
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}

// An import compresses what TOAST compresses with lz4 where the server
// has it (pglz otherwise), and any session reads it back.
func TestImportCompressesWithLz4(t *testing.T) {
	ctx := context.Background()
	url := testenv.PostgresURL(t)
	s, err := postgres.Open(ctx, url, postgres.Options{MaxConns: 2})
	s = storetest.Opened(t, s, err)
	description := strings.Repeat("Bright three-room flat close to the ferry. ", 80) // 3.4 KB, compressible
	stored := storetest.ImportOne(t, s, upstream.Listing{Title: "Flat", IsActive: true, Attributes: upstream.Attributes{Description: &description}})
	conn := connect(t, url)
	want := "pglz"
	var lz4 bool
	if err := conn.QueryRow(ctx, `SELECT COALESCE(bool_or(enumvals @> ARRAY['lz4']), false) FROM pg_settings
		WHERE name = 'default_toast_compression'`).Scan(&lz4); err != nil {
		t.Fatal(err)
	}
	if lz4 {
		want = "lz4"
	}
	var document *string
	if err := conn.QueryRow(ctx, `SELECT pg_column_compression(document) FROM listings WHERE id = $1`,
		stored.ID).Scan(&document); err != nil {
		t.Fatal(err)
	}
	if document == nil || *document != want {
		t.Fatalf("the imported document is compressed with %v; want %s", deref(document), want)
	}
	got, err := s.ListingByID(ctx, stored.ID)
	if err != nil || got.Attributes.Description == nil || *got.Attributes.Description != description {
		t.Fatalf("read back: %v", err)
	}
}

func deref(s *string) string {
	if s == nil {
		return "nothing"
	}
	return *s
}
