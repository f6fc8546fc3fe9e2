package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/realty-gateway/gateway/upstream"
)

// testModified: every revision of a listing has a Last-Modified (Modified,
// the time the store recorded it), whoever wrote it, and each one is in a
// later second than the one before, however fast they come: an
// If-Modified-Since or If-Unmodified-Since in whole seconds then tells any
// two revisions apart. A writer other than the gateway that leaves
// updatedDate alone still moves it; If-Unmodified-Since on a write
// evaluates the same time.
func testModified(t *testing.T, s FeedStore, exec Exec) {
	ctx := context.Background()
	f := seed(t, s)
	created := seedActive(t, s, f)
	read := func(what string) upstream.Encoded {
		t.Helper()
		e, err := s.EncodedByID(ctx, created.ID)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if again, err := s.EncodedByNumber(ctx, created.FirmID, created.No); err != nil || again.Modified != e.Modified {
			t.Fatalf("%s: by number Modified %d (%v), by id %d", what, again.Modified, err, e.Modified)
		}
		return e
	}
	// The create's own answer carries the insert's time, as reads do.
	if last := read("after the create"); created.Modified <= 0 || last.Modified != created.Modified {
		t.Fatalf("ImportListings() gave Modified %d; a read %d", created.Modified, last.Modified)
	}
	last := read("after the create")
	later := func(what string, e upstream.Encoded) {
		t.Helper()
		if e.Modified/1000 <= last.Modified/1000 {
			t.Fatalf("%s: Modified %d is not in a later second than %d", what, e.Modified, last.Modified)
		}
		last = e
	}
	// Three gateway writes in a row: well within one second of each other.
	for i := range 3 {
		next := f.listing(created.ID, 0)
		next.Title = "Revision " + string(rune('a'+i))
		written := mustUpdate(t, s, next)
		e := read("after an update")
		if written.Modified != e.Modified {
			t.Fatalf("UpdateListing() gave Modified %d; a read %d", written.Modified, e.Modified)
		}
		later("an update", e)
	}
	// Another writer's UPDATE leaves the document, updatedDate and all, as
	// it was: the read that makes its body records its time.
	before := last
	if err := exec(ctx, `UPDATE listings SET is_active = $1 WHERE id = $2`, false, created.ID); err != nil {
		t.Fatal(err)
	}
	// A write that holds the old revision's date is refused before any
	// read has recorded the new revision's time.
	cond := upstream.Precondition{IfUnmodifiedSince: before.Modified / 1000}
	if _, err := s.DeleteListing(ctx, created.FirmID, created.ID, cond); !errors.Is(err, upstream.ErrPreconditionFailed) {
		t.Fatalf("DeleteListing(If-Unmodified-Since the old revision's second) error = %v; want ErrPreconditionFailed", err)
	}
	later("another writer's update", read("after another writer's update"))
	if _, err := s.DeleteListing(ctx, created.FirmID, created.ID, cond); !errors.Is(err, upstream.ErrPreconditionFailed) {
		t.Fatalf("after the read: DeleteListing(the old second) error = %v; want ErrPreconditionFailed", err)
	}
	cond.IfUnmodifiedSince = last.Modified / 1000
	if _, err := s.DeleteListing(ctx, created.FirmID, created.ID, cond); err != nil {
		t.Fatalf("DeleteListing(If-Unmodified-Since the current revision's second) error = %v", err)
	}
}
