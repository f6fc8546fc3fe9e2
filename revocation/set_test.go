package revocation

import (
	"sync"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

func at(ms int64) time.Time { return time.UnixMilli(ms) }

func TestSetRevoked(t *testing.T) {
	const t0 = 1_800_000_000_500
	s := NewSet()
	s.Add(
		upstream.Revocation{FirmID: 1, UserID: 10, At: at(t0)},
		upstream.Revocation{FirmID: 2, At: at(t0)},
		upstream.Revocation{FirmID: 2, UserID: 20, At: at(t0 + 1000)},
	)
	tests := []struct {
		name        string
		firm, user  int64
		issuedMs    int64
		wantRevoked bool
	}{
		{name: "user revoked, issued before", firm: 1, user: 10, issuedMs: t0 - 1, wantRevoked: true},
		{name: "user revoked, issued at T", firm: 1, user: 10, issuedMs: t0, wantRevoked: true},
		{name: "user revoked, issued after", firm: 1, user: 10, issuedMs: t0 + 1},
		{name: "another user of the firm", firm: 1, user: 11, issuedMs: t0 - 1},
		{name: "another firm", firm: 3, user: 10, issuedMs: t0 - 1},
		{name: "firm revoked, any user", firm: 2, user: 99, issuedMs: t0, wantRevoked: true},
		{name: "firm revoked, issued after", firm: 2, user: 99, issuedMs: t0 + 1},
		{name: "firm and a later user revocation", firm: 2, user: 20, issuedMs: t0 + 500, wantRevoked: true},
		{name: "after both", firm: 2, user: 20, issuedMs: t0 + 1001},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := s.Revoked(tt.firm, tt.user, tt.issuedMs); got != tt.wantRevoked {
				t.Fatalf("Revoked(%d, %d, %d) = %t; want %t", tt.firm, tt.user, tt.issuedMs, got, tt.wantRevoked)
			}
		})
	}
	if s.Len() != 3 {
		t.Fatalf("Len() = %d; want 3", s.Len())
	}
}

func TestSetAddKeepsTheLaterTime(t *testing.T) {
	s := NewSet()
	if !s.Add(upstream.Revocation{FirmID: 1, UserID: 2, At: at(2000)}) {
		t.Fatal("Add() of a new revocation reported no change")
	}
	if s.Add(upstream.Revocation{FirmID: 1, UserID: 2, At: at(1000)}) {
		t.Fatal("Add() of an earlier revocation reported a change")
	}
	if !s.Revoked(1, 2, 2000) || s.Revoked(1, 2, 2001) {
		t.Fatal("an earlier revocation replaced a later one")
	}
	if !s.Add(upstream.Revocation{FirmID: 1, UserID: 2, At: at(3000)}) || !s.Revoked(1, 2, 2500) {
		t.Fatal("a later revocation was not applied")
	}
	if s.Len() != 1 {
		t.Fatalf("Len() = %d; want 1", s.Len())
	}
}

func TestSetPrune(t *testing.T) {
	s := NewSet()
	s.Add(
		upstream.Revocation{FirmID: 1, At: at(1000)},
		upstream.Revocation{FirmID: 1, UserID: 5, At: at(3000)},
		upstream.Revocation{FirmID: 2, UserID: 6, At: at(1000)},
	)
	s.Prune(at(2000))
	if s.Len() != 1 || s.Revoked(1, 7, 500) || s.Revoked(2, 6, 500) || !s.Revoked(1, 5, 500) {
		t.Fatalf("after Prune: Len %d; want only firm 1 user 5's revocation", s.Len())
	}
	s.Prune(at(3000)) // not before it
	if s.Len() != 1 {
		t.Fatalf("Prune(T) dropped the revocation at T")
	}
	s.Prune(at(3001))
	if s.Len() != 0 || s.Revoked(1, 5, 500) {
		t.Fatal("Prune past every revocation left one")
	}
}

// TestSetReadersDuringWrites runs readers against writers under -race:
// a reader sees a whole snapshot, before or after a change.
func TestSetReadersDuringWrites(t *testing.T) {
	s := NewSet()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Once firm 1's revocation at 5000 is in, a token issued
				// at 100 is revoked for good: revocations only grow.
				_ = s.Revoked(1, 1, 100)
			}
		})
	}
	for i := range int64(1000) {
		s.Add(upstream.Revocation{FirmID: i%7 + 1, UserID: i % 3, At: at(5000 + i)})
		if i%100 == 0 {
			s.Prune(at(5000 + i - 50))
		}
	}
	close(stop)
	wg.Wait()
	if !s.Revoked(1, 1, 100) && s.Len() > 0 {
		t.Fatal("revocations lost")
	}
}

func BenchmarkRevoked(b *testing.B) {
	s := NewSet()
	for i := range int64(100) {
		s.Add(upstream.Revocation{FirmID: i + 2, UserID: i, At: at(5000)})
	}
	b.Run("firm without revocations", func(b *testing.B) {
		for b.Loop() {
			s.Revoked(1, 1, 6000)
		}
	})
	s.Add(upstream.Revocation{FirmID: 1, UserID: 2, At: at(5000)})
	b.Run("another user of the firm revoked", func(b *testing.B) {
		for b.Loop() {
			s.Revoked(1, 1, 6000)
		}
	})
}

func TestSetGeneration(t *testing.T) {
	s := NewSet()
	g := s.Generation()
	if g == 0 {
		t.Fatal("the first generation is 0, which a token that was never checked holds")
	}
	step := func(what string, change func(), grows bool) {
		t.Helper()
		before := s.Generation()
		change()
		if after := s.Generation(); (after > before) != grows || after < before {
			t.Fatalf("%s: generation %d to %d; want it to grow: %t", what, before, after, grows)
		}
	}
	step("a new revocation", func() { s.Add(upstream.Revocation{FirmID: 1, At: at(2000)}) }, true)
	step("an older one of the same scope", func() { s.Add(upstream.Revocation{FirmID: 1, At: at(1000)}) }, false)
	step("a prune that drops nothing", func() { s.Prune(at(1500)) }, false)
	step("a prune that drops one", func() { s.Prune(at(2500)) }, true)
}
