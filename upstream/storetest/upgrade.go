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
// listing reads back, the firm's number counter continues above its
// largest number, and deleting the listing works on the upgraded schema.
func CheckUpgraded(t *testing.T, s upstream.Store) {
	t.Helper()
	ctx := context.Background()
	old, _ := UpgradedListing(t)
	if got, err := s.ListingByNumber(ctx, 1, 3); err != nil || got.Title != old.Title || got.Revision != 1 {
		t.Fatalf("ListingByNumber() after the upgrade = %+v, %v; want %+v", got, err, old)
	}
	next, err := s.ImportListings(ctx, []upstream.Listing{{Title: "Numbered after the upgrade", FirmID: 1, FirmUserID: 1}})
	if err != nil || next[0].No != 4 {
		t.Fatalf("auto-numbered import after the upgrade = %+v, %v; want number 4", next, err)
	}
	deleted, err := s.DeleteListing(ctx, 1, 7, upstream.Precondition{})
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

// VersionBeforeDisabledUsers is the schema version of the release before
// disabled users (step 4): a database it made has steps 1 to 3. The
// engines' upgrade tests from it write, with those steps, firm 1 "Firm A"
// with key digest 0x01, its users 1 alice@example.com (password hash
// "hash-a") and 2 otp@example.com (passwordless), and UpgradedListing, then
// open the store on it.
const VersionBeforeDisabledUsers = 3

// RotatedDigest is the key digest CheckUpgradedAccounts gives firm 1.
func RotatedDigest() []byte { return digest("rotated-after-upgrade") }

// CheckUpgradedAccounts checks a store just opened on a database of
// VersionBeforeDisabledUsers: its users are enabled and log in as before,
// and both account writes work on the upgraded schema: firm 1's key is
// rotated to RotatedDigest and alice is disabled.
func CheckUpgradedAccounts(t *testing.T, s upstream.Store) {
	t.Helper()
	ctx := context.Background()
	firm := upstream.Firm{ID: 1, Name: "Firm A"}
	alice := upstream.User{ID: 1, FirmID: 1, Email: "alice@example.com", PasswordHash: "hash-a"}
	otp := upstream.User{ID: 2, FirmID: 1, Email: "otp@example.com"}
	requireFirmByDigest(t, s, []byte{1}, firm, nil)
	requireUsers(t, s, alice, otp)

	if got, err := s.RotateFirmKey(ctx, 1, RotatedDigest()); err != nil || got != firm {
		t.Fatalf("RotateFirmKey() after the upgrade = %+v, %v; want %+v", got, err, firm)
	}
	requireFirmByDigest(t, s, []byte{1}, upstream.Firm{}, upstream.ErrNotFound)
	if got, err := s.DisableUser(ctx, 1, alice.Email); err != nil || got != alice {
		t.Fatalf("DisableUser() after the upgrade = %+v, %v; want %+v", got, err, alice)
	}
	CheckAccountsReopened(t, s)
}

// CheckAccountsReopened checks what CheckUpgradedAccounts wrote, in the
// same database opened once more: the new key, alice disabled, otp not.
func CheckAccountsReopened(t *testing.T, s upstream.Store) {
	t.Helper()
	requireFirmByDigest(t, s, RotatedDigest(), upstream.Firm{ID: 1, Name: "Firm A"}, nil)
	requireFirmByDigest(t, s, []byte{1}, upstream.Firm{}, upstream.ErrNotFound)
	if got, err := s.UserByEmail(context.Background(), 1, "alice@example.com"); !errors.Is(err, upstream.ErrNotFound) {
		t.Fatalf("UserByEmail() of the disabled user = %+v, %v; want ErrNotFound", got, err)
	}
	requireUsers(t, s, upstream.User{ID: 2, FirmID: 1, Email: "otp@example.com"})
}
