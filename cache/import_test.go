package cache

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/coding"
	"github.com/realty-gateway/gateway/upstream"
	"github.com/realty-gateway/gateway/upstream/sqlite"
	"github.com/realty-gateway/gateway/upstream/storetest"
)

// TestImportStreamReplacesAbsences: an id and a number read (and their
// absence cached in Redis) before a streamed import is found once ImportStream returns, and the
// progress is told of every listing.
func TestImportStreamReplacesAbsences(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "gateway.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	firm, err := s.AddFirm(ctx, "Firm", []byte("digest"))
	if err != nil {
		t.Fatal(err)
	}
	user, err := s.AddUser(ctx, upstream.User{FirmID: firm.ID, Email: "a@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	c, _, _ := newRedisCache(t, s) // absences are cached in Redis only
	for _, k := range []Key{ByID(2), ByNumber(firm.ID, 2)} {
		if _, err := c.Get(ctx, k, coding.Identity, time.Now()); !errors.Is(err, upstream.ErrNotFound) {
			t.Fatalf("Get(%+v) before the import: %v; want ErrNotFound", k, err)
		}
	}
	const n = 3
	done := 0
	got, err := c.ImportStream(ctx, func(yield func(upstream.Listing, error) bool) {
		for range n {
			if !yield(upstream.Listing{Title: "new", FirmID: firm.ID, FirmUserID: user.ID, IsActive: true}, nil) {
				return
			}
		}
	}, func(k int) { done += k })
	if err != nil || got != n || done != n {
		t.Fatalf("ImportStream() = %d, %v, progress %d; want %d", got, err, done, n)
	}
	for _, k := range []Key{ByID(2), ByNumber(firm.ID, 2)} {
		if _, err := c.Get(ctx, k, coding.Identity, time.Now()); err != nil {
			t.Fatalf("Get(%+v) after the import: %v; want the imported listing", k, err)
		}
	}
}

// TestImportOverARemovedListingOutdatesItsCopies: a streamed import under
// the id of a listing another writer removed, before the feed told the
// cache, leaves no copy of the removed listing servable. The store raises
// the new listing's revision above the removal's; the import floors its
// keys at that revision, above every copy of the old one.
func TestImportOverARemovedListingOutdatesItsCopies(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")
	s, err := sqlite.Open(ctx, path)
	s = storetest.Opened(t, s, err)
	old := storetest.ImportOne(t, s, upstream.Listing{Title: "old", IsActive: true})
	if _, err := s.UpdateListing(ctx, old, upstream.Precondition{}); err != nil { // revision 2
		t.Fatal(err)
	}
	c, _, _ := newRedisCache(t, s)
	k := ByID(old.ID)
	if e, err := c.Get(ctx, k, coding.Identity, time.Now()); err != nil || !bytes.Contains(e.Body, []byte(`"old"`)) {
		t.Fatalf("Get before the removal = %s, %v; want the old listing", e.Body, err)
	}
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	storetest.CloseAtEnd(t, "raw connection", db.Close)
	if _, err := db.ExecContext(ctx, `DELETE FROM listings WHERE id = ?`, k.ID); err != nil { // removed at revision 3
		t.Fatal(err)
	}
	n, err := c.ImportStream(ctx, func(yield func(upstream.Listing, error) bool) {
		yield(upstream.Listing{ID: k.ID, Title: "new", FirmID: old.FirmID, FirmUserID: old.FirmUserID, IsActive: true}, nil)
	}, nil)
	if err != nil || n != 1 {
		t.Fatalf("ImportStream() = %d, %v; want 1", n, err)
	}
	e, err := c.Get(ctx, k, coding.Identity, time.Now())
	if err != nil || !bytes.Contains(e.Body, []byte(`"new"`)) {
		t.Fatalf("Get after the import = %s, %v; want the imported listing, not the removed one", e.Body, err)
	}
}
