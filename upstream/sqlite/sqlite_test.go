package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/realty-gateway/gateway/upstream"
	"github.com/realty-gateway/gateway/upstream/sqlite"
	"github.com/realty-gateway/gateway/upstream/storetest"
)

func open(t *testing.T) upstream.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "data", "gateway.db"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestStore(t *testing.T) {
	storetest.Run(t, open)
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
	if err != nil {
		t.Fatalf("Open again: %v", err)
	}
	defer func() {
		if err := second.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	if empty, err := second.Empty(ctx); err != nil || empty {
		t.Fatalf("Empty() after reopening = %v, %v; want false, nil", empty, err)
	}
}

// userVersion reads PRAGMA user_version of the file at path.
func userVersion(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
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
	old := upstream.Listing{ID: 7, No: 3, Title: "Old flat", FirmID: 1, FirmUserID: 1, CreatedDate: 1000, UpdatedDate: 2000}
	old.Normalize()
	doc, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		string(oldSchema),
		`INSERT INTO firms (id, name, key_digest) VALUES (1, 'Firm A', x'01')`,
		`INSERT INTO firm_users (id, firm_id, email) VALUES (1, 1, 'alice@example.com')`,
		`INSERT INTO listings (id, firm_id, no, firm_user_id, is_active, revision, document)
		 VALUES (7, 1, 3, 1, 0, 1, '` + string(doc) + `')`,
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
	old.Revision = 1
	if got, err := s.ListingByNumber(ctx, 1, 3); err != nil || got.Title != old.Title || got.Revision != 1 {
		t.Fatalf("ListingByNumber() after the upgrade = %+v, %v; want %+v", got, err, old)
	}
	deleted, err := s.DeleteListing(ctx, 1, 7)
	if err != nil || deleted.ID != 7 || deleted.No != 3 || deleted.Revision != 2 {
		t.Fatalf("DeleteListing() = %+v, %v; want listing 7, no 3, revision 2", deleted, err)
	}
	if _, err := s.ListingByID(ctx, 7); !errors.Is(err, upstream.ErrNotFound) {
		t.Fatalf("ListingByID() after the delete: error = %v; want ErrNotFound", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v := userVersion(t, path); v != 2 {
		t.Fatalf("user_version after the upgrade = %d; want 2", v)
	}

	// Reopening applies nothing and keeps the tombstone.
	s, err = sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("Open again: %v", err)
	}
	defer s.Close()
	if _, err := s.ListingByNumber(ctx, 1, 3); !errors.Is(err, upstream.ErrNotFound) {
		t.Fatalf("ListingByNumber() after reopening: error = %v; want ErrNotFound", err)
	}
	_, err = s.ImportListings(ctx, []upstream.Listing{{ID: 7, Title: "New", FirmID: 1, FirmUserID: 1}})
	if !errors.Is(err, upstream.ErrConflict) {
		t.Fatalf("import of the deleted id: error = %v; want ErrConflict", err)
	}
	if v := userVersion(t, path); v != 2 {
		t.Fatalf("user_version after reopening = %d; want 2", v)
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
	if v := userVersion(t, path); v != 2 {
		t.Fatalf("user_version of a new file = %d; want 2", v)
	}
}

func TestOpenNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`PRAGMA user_version = 99`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(context.Background(), path)
	if err == nil {
		s.Close()
		t.Fatal("Open of a file at schema version 99 succeeded; want an error")
	}
	if !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Open error = %v; want it to say the schema is newer", err)
	}
}
