package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

// Token revocations and enabling a user again.

func testEnableUser(t *testing.T, open func(t *testing.T) upstream.Store) {
	tests := []struct {
		name      string
		giveFirm  func(f fixture) int64
		giveEmail string
		disable   bool
		want      func(f fixture) upstream.User // zero with wantErr
		wantErr   error
	}{
		{name: "disabled user", giveFirm: firmA, giveEmail: " Alice@Example.com", disable: true, want: func(f fixture) upstream.User { return f.alice }},
		{name: "enabled user", giveFirm: firmA, giveEmail: "otp@example.com", want: func(f fixture) upstream.User { return f.otp }},
		{name: "unknown e-mail", giveFirm: firmA, giveEmail: "nobody@example.com", wantErr: upstream.ErrNotFound},
		{name: "user of another firm", giveFirm: func(f fixture) int64 { return f.firmB.ID }, giveEmail: "otp@example.com", wantErr: upstream.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			f := seed(t, s)
			if tt.disable {
				if _, err := s.DisableUser(ctx, f.firmA.ID, f.alice.Email); err != nil {
					t.Fatalf("DisableUser(): %v", err)
				}
			}
			got, err := s.EnableUser(ctx, tt.giveFirm(f), tt.giveEmail)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("EnableUser() error = %v; want %v", err, tt.wantErr)
				}
				requireUsers(t, s, f.alice, f.otp, f.aliceOfB)
				return
			}
			if want := tt.want(f); err != nil || got != want {
				t.Fatalf("EnableUser() = %+v, %v; want %+v", got, err, want)
			}
			requireUsers(t, s, f.alice, f.otp, f.aliceOfB)
		})
	}
}

// revocationAt is a time with millisecond resolution, as revocations keep.
func revocationAt(ms int64) time.Time { return time.UnixMilli(ms) }

func testRevokeTokens(t *testing.T, open func(t *testing.T) upstream.Store) {
	const t0 = 1_800_000_000_123 // ms
	tests := []struct {
		name      string
		giveFirm  func(f fixture) int64
		giveEmail string
		want      func(f fixture) upstream.Revocation // zero with wantErr
		wantErr   error
	}{
		{name: "one user", giveFirm: firmA, giveEmail: " ALICE@example.com",
			want: func(f fixture) upstream.Revocation {
				return upstream.Revocation{FirmID: f.firmA.ID, UserID: f.alice.ID, At: revocationAt(t0)}
			}},
		{name: "the whole firm", giveFirm: firmA,
			want: func(f fixture) upstream.Revocation {
				return upstream.Revocation{FirmID: f.firmA.ID, At: revocationAt(t0)}
			}},
		{name: "unknown firm", giveFirm: func(f fixture) int64 { return f.unknownID }, wantErr: upstream.ErrNotFound},
		{name: "unknown e-mail", giveFirm: firmA, giveEmail: "nobody@example.com", wantErr: upstream.ErrNotFound},
		{name: "user of another firm", giveFirm: func(f fixture) int64 { return f.firmB.ID }, giveEmail: "otp@example.com", wantErr: upstream.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			f := seed(t, s)
			// Sub-millisecond digits are dropped.
			got, err := s.RevokeTokens(ctx, tt.giveFirm(f), tt.giveEmail, revocationAt(t0).Add(400*time.Microsecond))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("RevokeTokens() = %+v, %v; want %v", got, err, tt.wantErr)
				}
				requireRevocations(t, s, time.Time{})
				return
			}
			want := tt.want(f)
			if err != nil || !sameRevocation(got, want) {
				t.Fatalf("RevokeTokens() = %+v, %v; want %+v", got, err, want)
			}
			requireRevocations(t, s, time.Time{}, want)
		})
	}

	t.Run("the later time stays", func(t *testing.T) {
		ctx := context.Background()
		s := open(t)
		f := seed(t, s)
		later := upstream.Revocation{FirmID: f.firmA.ID, UserID: f.alice.ID, At: revocationAt(t0 + 5)}
		for _, at := range []int64{t0, t0 + 5, t0 + 1} {
			got, err := s.RevokeTokens(ctx, f.firmA.ID, f.alice.Email, revocationAt(at))
			if err != nil || at >= t0+5 && !sameRevocation(got, later) {
				t.Fatalf("RevokeTokens(%d) = %+v, %v", at, got, err)
			}
		}
		got, err := s.RevokeTokens(ctx, f.firmA.ID, f.alice.Email, revocationAt(t0+1))
		if err != nil || !sameRevocation(got, later) {
			t.Fatalf("RevokeTokens() of an earlier time = %+v, %v; want the later one in force, %+v", got, err, later)
		}
		requireRevocations(t, s, time.Time{}, later)
	})

	t.Run("a disabled user", func(t *testing.T) {
		ctx := context.Background()
		s := open(t)
		f := seed(t, s)
		if _, err := s.DisableUser(ctx, f.firmA.ID, f.otp.Email); err != nil {
			t.Fatal(err)
		}
		want := upstream.Revocation{FirmID: f.firmA.ID, UserID: f.otp.ID, At: revocationAt(t0)}
		if got, err := s.RevokeTokens(ctx, f.firmA.ID, f.otp.Email, revocationAt(t0)); err != nil || !sameRevocation(got, want) {
			t.Fatalf("RevokeTokens() of a disabled user = %+v, %v; want %+v", got, err, want)
		}
	})

	t.Run("since and prune", func(t *testing.T) {
		ctx := context.Background()
		s := open(t)
		f := seed(t, s)
		old := upstream.Revocation{FirmID: f.firmB.ID, At: revocationAt(t0 - 10_000)}
		user := upstream.Revocation{FirmID: f.firmA.ID, UserID: f.alice.ID, At: revocationAt(t0)}
		firm := upstream.Revocation{FirmID: f.firmA.ID, At: revocationAt(t0 + 1)}
		for _, r := range []struct {
			firm  int64
			email string
			at    time.Time
		}{{f.firmB.ID, "", old.At}, {f.firmA.ID, f.alice.Email, user.At}, {f.firmA.ID, "", firm.At}} {
			if _, err := s.RevokeTokens(ctx, r.firm, r.email, r.at); err != nil {
				t.Fatal(err)
			}
		}
		requireRevocations(t, s, time.Time{}, old, user, firm)
		requireRevocations(t, s, revocationAt(t0-10_000), user, firm) // after since, not at it
		requireRevocations(t, s, revocationAt(t0), firm)
		requireRevocations(t, s, revocationAt(t0+1))

		// Prune removes what is before its time, not at it.
		if n, err := s.PruneRevocations(ctx, revocationAt(t0)); err != nil || n != 1 {
			t.Fatalf("PruneRevocations() = %d, %v; want 1", n, err)
		}
		requireRevocations(t, s, time.Time{}, user, firm)
		if n, err := s.PruneRevocations(ctx, revocationAt(t0)); err != nil || n != 0 {
			t.Fatalf("PruneRevocations() again = %d, %v; want 0", n, err)
		}
		if n, err := s.PruneRevocations(ctx, revocationAt(t0+2)); err != nil || n != 2 {
			t.Fatalf("PruneRevocations() of the rest = %d, %v; want 2", n, err)
		}
		requireRevocations(t, s, time.Time{})
	})
}

func sameRevocation(a, b upstream.Revocation) bool {
	return a.FirmID == b.FirmID && a.UserID == b.UserID && a.At.Equal(b.At)
}

// requireRevocations checks that Revocations(since) returns want, in any
// order.
func requireRevocations(t *testing.T, s upstream.Store, since time.Time, want ...upstream.Revocation) {
	t.Helper()
	got, err := s.Revocations(context.Background(), since)
	if err != nil {
		t.Fatalf("Revocations() error = %v", err)
	}
	byScope := func(a, b upstream.Revocation) int {
		if c := a.FirmID - b.FirmID; c != 0 {
			return int(c)
		}
		return int(a.UserID - b.UserID)
	}
	slices.SortFunc(got, byScope)
	slices.SortFunc(want, byScope)
	if !slices.EqualFunc(got, want, sameRevocation) {
		t.Fatalf("Revocations(%v) = %+v; want %+v", since, got, want)
	}
}
