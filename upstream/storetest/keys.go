package storetest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

// The token-signing key set: published, made signer, retired.

func testSigningKeys(t *testing.T, open func(t *testing.T) upstream.Store) {
	ctx := context.Background()
	s := open(t)
	t0 := time.UnixMilli(1_800_000_000_000)
	ed := upstream.SigningKey{ID: "ed-1", Alg: upstream.SigningAlgEdDSA, PublicKey: publicKey(t, upstream.SigningAlgEdDSA)}
	ec := upstream.SigningKey{ID: "ec-1", Alg: upstream.SigningAlgES256, PublicKey: publicKey(t, upstream.SigningAlgES256)}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	p384DER, _ := x509.MarshalPKIXPublicKey(p384.Public())
	if keys, err := s.SigningKeys(ctx); err != nil || len(keys) != 0 {
		t.Fatalf("SigningKeys() of a new store = %v, %v; want none", keys, err)
	}
	for _, k := range []upstream.SigningKey{ed, ec} {
		got, err := s.AddSigningKey(ctx, k, t0)
		if err != nil || got.ID != k.ID || got.Alg != k.Alg || !bytes.Equal(got.PublicKey, k.PublicKey) || !got.AddedAt.Equal(t0) {
			t.Fatalf("AddSigningKey(%s) = %+v, %v", k.ID, got, err)
		}
	}
	// Published again, as every gateway does at start: the first time stays.
	if got, err := s.AddSigningKey(ctx, ed, t0.Add(time.Hour)); err != nil || !got.AddedAt.Equal(t0) {
		t.Fatalf("AddSigningKey(again) = %+v, %v; want the stored key", got, err)
	}
	refusals := []struct {
		name string
		give upstream.SigningKey
		want error
	}{
		{"kid of another key", upstream.SigningKey{ID: "ed-1", Alg: upstream.SigningAlgEdDSA, PublicKey: publicKey(t, upstream.SigningAlgEdDSA)}, upstream.ErrConflict},
		{"kid of another algorithm", upstream.SigningKey{ID: "ed-1", Alg: upstream.SigningAlgES256, PublicKey: ec.PublicKey}, upstream.ErrConflict},
		{"no kid", upstream.SigningKey{Alg: upstream.SigningAlgEdDSA, PublicKey: ed.PublicKey}, upstream.ErrInvalid},
		{"HS256", upstream.SigningKey{ID: "hs", Alg: "HS256", PublicKey: ed.PublicKey}, upstream.ErrInvalid},
		{"no key", upstream.SigningKey{ID: "empty", Alg: upstream.SigningAlgEdDSA}, upstream.ErrInvalid},
		{"not a key", upstream.SigningKey{ID: "junk", Alg: upstream.SigningAlgEdDSA, PublicKey: []byte("junk")}, upstream.ErrInvalid},
		{"Ed25519 key for ES256", upstream.SigningKey{ID: "mixed", Alg: upstream.SigningAlgES256, PublicKey: ed.PublicKey}, upstream.ErrInvalid},
		{"P-384 key for ES256", upstream.SigningKey{ID: "p384", Alg: upstream.SigningAlgES256, PublicKey: p384DER}, upstream.ErrInvalid},
	}
	for _, tt := range refusals {
		if _, err := s.AddSigningKey(ctx, tt.give, t0); !errors.Is(err, tt.want) {
			t.Errorf("AddSigningKey(%s) = %v; want %v", tt.name, err, tt.want)
		}
	}
	requireActive(t, s, "")
	if _, err := s.ActivateSigningKey(ctx, "nope", t0); !errors.Is(err, upstream.ErrNotFound) {
		t.Fatalf("ActivateSigningKey(unknown) = %v; want ErrNotFound", err)
	}
	if _, err := s.ActivateSigningKey(ctx, "ed-1", t0); err != nil {
		t.Fatalf("ActivateSigningKey(ed-1): %v", err)
	}
	requireActive(t, s, "ed-1")
	// Made signer by a process whose clock is behind: still the later one.
	if got, err := s.ActivateSigningKey(ctx, "ec-1", t0.Add(-time.Minute)); err != nil || !got.SignsFrom.After(t0) {
		t.Fatalf("ActivateSigningKey(ec-1, earlier) = %+v, %v; want a SignsFrom after ed-1's", got, err)
	}
	requireActive(t, s, "ec-1")
	if _, err := s.RetireSigningKey(ctx, "ec-1", t0.Add(time.Hour)); !errors.Is(err, upstream.ErrConflict) {
		t.Fatalf("RetireSigningKey(the signer) = %v; want ErrConflict", err)
	}
	if _, err := s.RetireSigningKey(ctx, "nope", t0); !errors.Is(err, upstream.ErrNotFound) {
		t.Fatalf("RetireSigningKey(unknown) = %v; want ErrNotFound", err)
	}
	until := t0.Add(2 * time.Hour)
	if got, err := s.RetireSigningKey(ctx, "ed-1", until); err != nil || !got.VerifiesUntil.Equal(until) || !got.Retired() {
		t.Fatalf("RetireSigningKey(ed-1) = %+v, %v", got, err)
	}
	// Retired again: the first time stays.
	if got, err := s.RetireSigningKey(ctx, "ed-1", until.Add(time.Hour)); err != nil || !got.VerifiesUntil.Equal(until) {
		t.Fatalf("RetireSigningKey(again) = %+v, %v; want until %v", got, err, until)
	}
	if _, err := s.ActivateSigningKey(ctx, "ed-1", t0.Add(3*time.Hour)); !errors.Is(err, upstream.ErrConflict) {
		t.Fatalf("ActivateSigningKey(retired) = %v; want ErrConflict", err)
	}
	requireActive(t, s, "ec-1")
}

// publicKey is a new key's public half for alg, in PKIX DER.
func publicKey(t *testing.T, alg string) []byte {
	t.Helper()
	var pub any
	if alg == upstream.SigningAlgEdDSA {
		pub, _, _ = ed25519.GenerateKey(rand.Reader)
	} else {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		pub = k.Public()
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// requireActive checks which key signs; "" for none.
func requireActive(t *testing.T, s upstream.Store, want string) {
	t.Helper()
	keys, err := s.SigningKeys(context.Background())
	if err != nil {
		t.Fatalf("SigningKeys(): %v", err)
	}
	got, _ := upstream.ActiveSigningKey(keys)
	if got.ID != want {
		t.Fatalf("active signing key = %q; want %q (keys %+v)", got.ID, want, keys)
	}
}
