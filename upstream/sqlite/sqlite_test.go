package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/upstream"
	"github.com/realty-gateway/gateway/upstream/internal/sqlstore"
	"github.com/realty-gateway/gateway/upstream/sqlite"
	"github.com/realty-gateway/gateway/upstream/storetest"
)

func open(t *testing.T) upstream.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "data", "gateway.db"))
	return storetest.Opened(t, s, err)
}

func TestStore(t *testing.T) {
	storetest.Run(t, open)
}

func TestFeed(t *testing.T) {
	storetest.RunFeed(t, func(t *testing.T) (storetest.FeedStore, storetest.Exec) {
		path := filepath.Join(t.TempDir(), "gateway.db")
		s, err := sqlite.Open(context.Background(), path)
		db := openRaw(t, path)
		return storetest.Opened(t, s, err), func(ctx context.Context, stmt string, args ...any) error {
			_, err := db.ExecContext(ctx, stmt, args...)
			return err
		}
	})
}

// schemaVersion is the user_version of a file this build has opened: the
// number of steps in migrations/.
const schemaVersion = 12

// openRaw opens the file at path beside any store open on it, as an older
// release or an operator would, and closes it when the test ends.
func openRaw(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	storetest.CloseAtEnd(t, path, db.Close)
	return db
}

// An import keeps each listing's bytes once, and reads serve them.
func TestImportKeepsOneCopy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.db")
	s, err := sqlite.Open(context.Background(), path)
	s = storetest.Opened(t, s, err)
	db := openRaw(t, path)
	storetest.RequireImportKeepsOneCopy(t, s, func(id int64) (c storetest.RowCopies) {
		err := db.QueryRow(`SELECT body IS NOT NULL, document_body_revision, revision FROM listings WHERE id = ?`,
			id).Scan(&c.Body, &c.DocumentBodyRevision, &c.Revision)
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}

func TestNumberConstraint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.db")
	s, err := sqlite.Open(context.Background(), path)
	storetest.CheckNumberConstraint(t, storetest.Opened(t, s, err), openRaw(t, path).ExecContext)
}

func TestOpenTwice(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")
	first, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if _, err := first.AddFirm(ctx, "Firm A", []byte("digest")); err != nil {
		t.Fatalf("AddFirm: %v", err)
	}
	if err := first.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	second, err := sqlite.Open(ctx, path)
	second = storetest.Opened(t, second, err)
	if empty, err := second.Empty(ctx); err != nil || empty {
		t.Fatalf("Empty() after reopening = %v, %v; want false, nil", empty, err)
	}
}

// userVersion reads PRAGMA user_version of the file at path.
func userVersion(t *testing.T, path string) int {
	t.Helper()
	var v int
	if err := openRaw(t, path).QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		t.Fatalf("PRAGMA user_version: %v", err)
	}
	return v
}

// TestUpgradeUnversioned opens a file made by the release before schema
// versioning (its schema.sql, user_version 0) that holds a listing, and
// checks that the listing survives and can be deleted.
func TestUpgradeUnversioned(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")
	oldSchema, err := os.ReadFile("testdata/schema_v1.sql")
	if err != nil {
		t.Fatal(err)
	}
	_, doc := storetest.UpgradedListing(t)
	db := openRaw(t, path)
	for _, stmt := range []string{
		string(oldSchema),
		`INSERT INTO firms (id, name, key_digest) VALUES (1, 'Firm A', x'01')`,
		`INSERT INTO firm_users (id, firm_id, email) VALUES (1, 1, 'alice@example.com')`,
		`INSERT INTO listings (id, firm_id, no, firm_user_id, is_active, revision, document)
		 VALUES (7, 1, 3, 1, 0, 1, '` + doc + `')`,
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("old database: %v", err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	storetest.CheckUpgraded(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v := userVersion(t, path); v != schemaVersion {
		t.Fatalf("user_version after the upgrade = %d; want %d", v, schemaVersion)
	}
	requireRebuiltListings(t, path)

	// Reopening applies nothing and keeps the tombstone.
	s, err = sqlite.Open(ctx, path)
	s = storetest.Opened(t, s, err)
	storetest.CheckReopened(t, s)
	if v := userVersion(t, path); v != schemaVersion {
		t.Fatalf("user_version after reopening = %d; want %d", v, schemaVersion)
	}
	storetest.CheckNumberConstraint(t, s, openRaw(t, path).ExecContext)
}

// TestUpgradeFromVersion3 opens a file made by the release before disabled
// users (steps 1 to 3 of migrations/, user_version 3) that holds a firm, its
// users and a listing, and checks the upgrade to this build's version: the
// data survives, the users are enabled, a user can be disabled and the
// firm's key rotated, and both stay so after reopening.
func TestUpgradeFromVersion3(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")
	steps, err := sqlstore.LoadSteps(os.DirFS("."), "migrations")
	if err != nil {
		t.Fatal(err)
	}
	_, doc := storetest.UpgradedListing(t)
	db := openRaw(t, path)
	old := storetest.VersionBeforeDisabledUsers
	for _, stmt := range append(slices.Clone(steps[:old]),
		fmt.Sprintf(`PRAGMA user_version = %d`, old),
		`INSERT INTO firms (id, name, key_digest) VALUES (1, 'Firm A', x'01')`,
		`INSERT INTO firm_users (id, firm_id, email, password_hash)
		 VALUES (1, 1, 'alice@example.com', 'hash-a'), (2, 1, 'otp@example.com', '')`,
		`INSERT INTO listings (id, firm_id, no, firm_user_id, is_active, revision, document)
		 VALUES (7, 1, 3, 1, 0, 1, '`+doc+`')`,
	) {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("database of version %d: %v", old, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if v := userVersion(t, path); v != old {
		t.Fatalf("user_version of the old file = %d; want %d", v, old)
	}

	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	storetest.CheckUpgraded(t, s)
	storetest.CheckUpgradedAccounts(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v := userVersion(t, path); v != schemaVersion {
		t.Fatalf("user_version after the upgrade = %d; want %d", v, schemaVersion)
	}

	s, err = sqlite.Open(ctx, path)
	s = storetest.Opened(t, s, err)
	storetest.CheckReopened(t, s)
	storetest.CheckAccountsReopened(t, s)
	if v := userVersion(t, path); v != schemaVersion {
		t.Fatalf("user_version after reopening = %d; want %d", v, schemaVersion)
	}
}

// requireRebuiltListings checks what step 3's rebuild of the listings table
// must keep: its index, and foreign keys that hold.
func requireRebuiltListings(t *testing.T, path string) {
	t.Helper()
	db := openRaw(t, path)
	var indexes int
	err := db.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = 'listings_firm_user_id' AND tbl_name = 'listings'`).
		Scan(&indexes)
	if err != nil || indexes != 1 {
		t.Fatalf("index listings_firm_user_id on listings: %d, %v; want 1", indexes, err)
	}
	rows, err := db.Query(`PRAGMA foreign_key_check`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	if rows.Next() {
		t.Fatal("PRAGMA foreign_key_check reports violations after the upgrade")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestNewFileVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.db")
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v := userVersion(t, path); v != schemaVersion {
		t.Fatalf("user_version of a new file = %d; want %d", v, schemaVersion)
	}
}

func TestOpenNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.db")
	db := openRaw(t, path)
	if _, err := db.Exec(`PRAGMA user_version = 99`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(context.Background(), path)
	if err == nil {
		t.Fatalf("Open of a file at schema version 99 succeeded (Close: %v); want an error", s.Close())
	}
	if !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Open error = %v; want it to say the schema is newer", err)
	}
}

// TestOlderSQLiteFiresTheTriggers writes the file with the sqlite3 shell of
// the machine (Debian 12's is 3.40, older than the SQLite this build
// embeds), as an operator or another program would: its writes must
// succeed and be recorded in the change feed, their revisions raised.
func TestOlderSQLiteFiresTheTriggers(t *testing.T) {
	shell, err := exec.LookPath("sqlite3")
	if err != nil {
		if testenv.RequireServices() {
			t.Fatalf("no sqlite3 shell and GATEWAY_TEST_REQUIRE_SERVICES=1: %v", err)
		}
		t.Skipf("SKIP: no sqlite3 shell (%v); install Debian's sqlite3 to run this test", err)
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")
	opened, err := sqlite.Open(ctx, path)
	s := storetest.Opened(t, opened, err)
	l := storetest.ImportOne(t, s, upstream.Listing{Title: "Flat", IsActive: true})
	version, err := exec.Command(shell, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sqlite3 shell %s", strings.Fields(string(version))[0])
	script := fmt.Sprintf(`PRAGMA busy_timeout = 5000;
UPDATE listings SET document = replace(document, '"title":"Flat"', '"title":"From the shell"') WHERE id = %[1]d;
UPDATE listings SET is_active = 0 WHERE id = %[1]d;
DELETE FROM listings WHERE id = %[1]d;
INSERT INTO listings (id, firm_id, no, firm_user_id, is_active, revision, document)
  SELECT %[1]d, %[2]d, %[3]d, %[4]d, 1, 1, '{"title":"Back"}';
`, l.ID, l.FirmID, l.No, l.FirmUserID)
	cmd := exec.Command(shell, "-bail", path)
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sqlite3: %v\n%s", err, out)
	}
	got, err := s.ListingByID(ctx, l.ID)
	if err != nil || got.Title != "Back" || got.Revision != 5 || !got.IsActive {
		t.Fatalf("after the shell's writes: %+v, %v; want title Back, active, revision 5", got, err)
	}
	p, err := s.Position(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := s.Unapplied(ctx, p.LastSeq, 100)
	if err != nil {
		t.Fatal(err)
	}
	var revisions []int64
	for _, c := range cs {
		revisions = append(revisions, c.Revision)
	}
	// The import, the two updates, the delete, and the reinsert (recorded
	// once more by the update that raised its revision).
	if want := []int64{1, 2, 3, 4, 5, 5}; !slices.Equal(revisions, want) {
		t.Fatalf("recorded revisions %v; want %v (changes %+v)", revisions, want, cs)
	}
	if !cs[3].Deleted || cs[2].VisibleAfter || !cs[1].VisibleAfter {
		t.Fatalf("changes %+v: want the update visible, the deactivation not, the removal deleted", cs)
	}
}

func BenchmarkRead(b *testing.B) {
	s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "gateway.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.BenchRead(b, s)
}
