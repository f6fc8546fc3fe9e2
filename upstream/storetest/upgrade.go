package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/realty-gateway/gateway/upstream"
)

// The upgrade tests of each engine write, with the schema of the release
// before versioning, firm 1, its user 1, and UpgradedListing as its
// document, then open the store on it.

// UpgradedListing is the listing an old database holds: id 7, number 3 of
// firm 1, revision 1. The second result is its stored document.
func UpgradedListing(t *testing.T) (upstream.Listing, string) {
	t.Helper()
	l := upstream.Listing{ID: 7, No: 3, Title: "Old flat", FirmID: 1, FirmUserID: 1, CreatedDate: 1000, UpdatedDate: 2000}
	l.Normalize()
	return l, string(mustJSON(t, l))
}

// CheckUpgraded checks a store just opened on an old database: the
// listing reads back, and deleting it works on the upgraded schema.
func CheckUpgraded(t *testing.T, s upstream.Store) {
	t.Helper()
	ctx := context.Background()
	old, _ := UpgradedListing(t)
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
}

// CheckReopened checks the same database opened once more: the tombstone
// stays, and its id is still taken.
func CheckReopened(t *testing.T, s upstream.Store) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.ListingByNumber(ctx, 1, 3); !errors.Is(err, upstream.ErrNotFound) {
		t.Fatalf("ListingByNumber() after reopening: error = %v; want ErrNotFound", err)
	}
	_, err := s.ImportListings(ctx, []upstream.Listing{{ID: 7, Title: "New", FirmID: 1, FirmUserID: 1}})
	if !errors.Is(err, upstream.ErrConflict) {
		t.Fatalf("import of the deleted id: error = %v; want ErrConflict", err)
	}
}
