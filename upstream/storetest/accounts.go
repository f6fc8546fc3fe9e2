package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/realty-gateway/gateway/upstream"
)

// The operator's account commands: a firm's API key replaced, a user
// disabled.

func testRotateFirmKey(t *testing.T, open func(t *testing.T) upstream.Store) {
	tests := []struct {
		name    string
		give    func(f fixture) (int64, []byte)
		wantErr error
	}{
		{name: "new key", give: func(f fixture) (int64, []byte) { return f.firmA.ID, digest("key-a2") }},
		{name: "its own key again", give: func(f fixture) (int64, []byte) { return f.firmA.ID, f.digestA }},
		{name: "unknown firm", give: func(f fixture) (int64, []byte) { return f.unknownID, digest("key-a2") }, wantErr: upstream.ErrNotFound},
		{name: "key of another firm", give: func(f fixture) (int64, []byte) { return f.firmA.ID, f.digestB }, wantErr: upstream.ErrConflict},
		{name: "no digest", give: func(f fixture) (int64, []byte) { return f.firmA.ID, nil }, wantErr: upstream.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			f := seed(t, s)
			firmID, newDigest := tt.give(f)
			got, err := s.RotateFirmKey(ctx, firmID, newDigest)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("RotateFirmKey() error = %v; want %v", err, tt.wantErr)
				}
				// Nothing changed: both firms keep their keys.
				requireFirmByDigest(t, s, f.digestA, f.firmA, nil)
				requireFirmByDigest(t, s, f.digestB, f.firmB, nil)
				return
			}
			if err != nil || got != f.firmA {
				t.Fatalf("RotateFirmKey() = %+v, %v; want %+v", got, err, f.firmA)
			}
			requireFirmByDigest(t, s, newDigest, f.firmA, nil)
			if string(newDigest) != string(f.digestA) {
				requireFirmByDigest(t, s, f.digestA, upstream.Firm{}, upstream.ErrNotFound)
			}
			requireFirmByDigest(t, s, f.digestB, f.firmB, nil)
		})
	}

	t.Run("twice", func(t *testing.T) {
		ctx := context.Background()
		s := open(t)
		f := seed(t, s)
		for _, key := range []string{"key-a2", "key-a3"} {
			if _, err := s.RotateFirmKey(ctx, f.firmA.ID, digest(key)); err != nil {
				t.Fatalf("RotateFirmKey(%s): %v", key, err)
			}
		}
		requireFirmByDigest(t, s, digest("key-a3"), f.firmA, nil)
		for _, old := range [][]byte{f.digestA, digest("key-a2")} {
			requireFirmByDigest(t, s, old, upstream.Firm{}, upstream.ErrNotFound)
		}
		// The retired key is free again for a firm of its own.
		if _, err := s.AddFirm(ctx, "Firm C", f.digestA); err != nil {
			t.Fatalf("AddFirm with firm A's retired key digest: %v", err)
		}
	})
}

func requireFirmByDigest(t *testing.T, s upstream.Store, d []byte, want upstream.Firm, wantErr error) {
	t.Helper()
	got, err := s.FirmByKeyDigest(context.Background(), d)
	if !errors.Is(err, wantErr) || (wantErr == nil && err != nil) || got != want {
		t.Fatalf("FirmByKeyDigest() = %+v, %v; want %+v, %v", got, err, want, wantErr)
	}
}

func testDisableUser(t *testing.T, open func(t *testing.T) upstream.Store) {
	tests := []struct {
		name      string
		giveFirm  func(f fixture) int64
		giveEmail string
		want      func(f fixture) upstream.User // zero with wantErr
		wantErr   error
	}{
		{name: "password user", giveFirm: firmA, giveEmail: "alice@example.com", want: func(f fixture) upstream.User { return f.alice }},
		{name: "case and spaces", giveFirm: firmA, giveEmail: "  ALICE@Example.com ", want: func(f fixture) upstream.User { return f.alice }},
		{name: "passwordless user", giveFirm: firmA, giveEmail: "otp@example.com", want: func(f fixture) upstream.User { return f.otp }},
		{name: "unknown e-mail", giveFirm: firmA, giveEmail: "nobody@example.com", wantErr: upstream.ErrNotFound},
		{name: "user of another firm", giveFirm: func(f fixture) int64 { return f.firmB.ID }, giveEmail: "otp@example.com", wantErr: upstream.ErrNotFound},
		{name: "unknown firm", giveFirm: func(f fixture) int64 { return f.unknownID }, giveEmail: "alice@example.com", wantErr: upstream.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			f := seed(t, s)
			others := []upstream.User{f.alice, f.otp, f.aliceOfB}
			got, err := s.DisableUser(ctx, tt.giveFirm(f), tt.giveEmail)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("DisableUser() error = %v; want %v", err, tt.wantErr)
				}
				requireUsers(t, s, others...)
				return
			}
			want := tt.want(f)
			if err != nil || got != want {
				t.Fatalf("DisableUser() = %+v, %v; want %+v", got, err, want)
			}
			if found, err := s.UserByEmail(ctx, want.FirmID, want.Email); !errors.Is(err, upstream.ErrNotFound) {
				t.Fatalf("UserByEmail() of the disabled user = %+v, %v; want ErrNotFound", found, err)
			}
			var enabled []upstream.User
			for _, u := range others {
				if u != want {
					enabled = append(enabled, u)
				}
			}
			requireUsers(t, s, enabled...)

			// Again: nothing changes, and it succeeds.
			if again, err := s.DisableUser(ctx, want.FirmID, want.Email); err != nil || again != want {
				t.Fatalf("DisableUser() again = %+v, %v; want %+v", again, err, want)
			}
			// The e-mail stays taken within the firm.
			if _, err := s.AddUser(ctx, upstream.User{FirmID: want.FirmID, Email: want.Email}); !errors.Is(err, upstream.ErrConflict) {
				t.Fatalf("AddUser() with a disabled user's e-mail: error = %v; want ErrConflict", err)
			}
		})
	}

	t.Run("listings stay", func(t *testing.T) {
		ctx := context.Background()
		s := open(t)
		f := seed(t, s)
		stored := mustImport(t, s, []upstream.Listing{f.listing(0, 0)})[0]
		if _, err := s.DisableUser(ctx, f.firmA.ID, f.alice.Email); err != nil {
			t.Fatalf("DisableUser(): %v", err)
		}
		if got, err := s.ListingByID(ctx, stored.ID); err != nil || got.FirmUserID != f.alice.ID {
			t.Fatalf("ListingByID() of a disabled user's listing = %+v, %v; want it, owned by %d", got, err, f.alice.ID)
		}
	})
}

func firmA(f fixture) int64 { return f.firmA.ID }

// requireUsers checks that UserByEmail still finds each user as it is.
func requireUsers(t *testing.T, s upstream.Store, users ...upstream.User) {
	t.Helper()
	for _, u := range users {
		if got, err := s.UserByEmail(context.Background(), u.FirmID, u.Email); err != nil || got != u {
			t.Fatalf("UserByEmail(%d, %s) = %+v, %v; want %+v", u.FirmID, u.Email, got, err, u)
		}
	}
}
