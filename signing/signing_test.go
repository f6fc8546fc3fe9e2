package signing_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"database/sql"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/realty-gateway/gateway/signing"
	"github.com/realty-gateway/gateway/upstream"
	"github.com/realty-gateway/gateway/upstream/sqlite"
)

// openStore is a real SQLite store of the test's own.
func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "gateway.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newKeyring(t *testing.T, s signing.Store, cfg signing.Config, hmacs ...signing.HMACKey) *signing.Keyring {
	t.Helper()
	if cfg.Poll == 0 {
		cfg.Poll = time.Hour
	}
	r, err := signing.New(cfg, signing.Deps{Store: s, HMAC: hmacs, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("signing.New: %v", err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return r
}

// writePEM writes a private key as PKCS #8 PEM with the given mode.
func writePEM(t *testing.T, dir, name string, key any, mode os.FileMode) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, dir, name, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), mode)
}

func writeFile(t *testing.T, dir, name string, b []byte, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // umask aside
		t.Fatal(err)
	}
	return path
}

func TestFirstStartGeneratesPublishesAndSigns(t *testing.T) {
	for _, alg := range []string{upstream.SigningAlgEdDSA, upstream.SigningAlgES256} {
		t.Run(alg, func(t *testing.T) {
			s := openStore(t)
			dir := filepath.Join(t.TempDir(), "signing-keys")
			r := newKeyring(t, s, signing.Config{Algorithm: alg, KeyDir: dir})
			kid, gotAlg := r.Current().Signer()
			if gotAlg != alg {
				t.Fatalf("signer alg %s; want %s", gotAlg, alg)
			}
			info, err := os.Stat(filepath.Join(dir, kid+".pem"))
			if err != nil || info.Mode().Perm() != 0o600 {
				t.Fatalf("generated key file: %v, mode %v; want mode 0600", err, info.Mode())
			}
			keys, err := s.SigningKeys(context.Background())
			if active, ok := upstream.ActiveSigningKey(keys); err != nil || !ok || active.ID != kid || active.Alg != alg {
				t.Fatalf("store's key set %+v, %v; want %s signing", keys, err, kid)
			}
			// A restart reads the same key: no second one.
			r2 := newKeyring(t, s, signing.Config{Algorithm: alg, KeyDir: dir})
			if kid2, _ := r2.Current().Signer(); kid2 != kid {
				t.Fatalf("after a restart the signer is %s; want %s", kid2, kid)
			}
			if keys, _ := s.SigningKeys(context.Background()); len(keys) != 1 {
				t.Fatalf("after a restart the store has %d keys; want 1", len(keys))
			}
			requireJWKS(t, r.Current(), kid)
		})
	}
}

// requireJWKS checks the JWKS lists exactly kids, public members only.
func requireJWKS(t *testing.T, set *signing.KeySet, kids ...string) {
	t.Helper()
	body, etag := set.JWKS()
	var doc struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || !strings.HasPrefix(etag, `"`) {
		t.Fatalf("JWKS %s (etag %s): %v", body, etag, err)
	}
	if len(doc.Keys) != len(kids) {
		t.Fatalf("JWKS lists %d keys; want %v: %s", len(doc.Keys), kids, body)
	}
	for i, k := range doc.Keys {
		if k["kid"] != kids[i] || k["use"] != "sig" || k["x"] == nil {
			t.Errorf("JWKS key %d = %v; want kid %s, use sig, x", i, k, kids[i])
		}
		for _, private := range []string{"d", "k", "p", "q"} {
			if _, ok := k[private]; ok {
				t.Errorf("JWKS key %s has the private member %q", kids[i], private)
			}
		}
	}
}

func TestBadConfigurationIsAStartError(t *testing.T) {
	dir := t.TempDir()
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ed1 := writePEM(t, dir, "ed.pem", ed, 0o600)
	ec1 := writePEM(t, dir, "ec.pem", ec, 0o600)
	open := writePEM(t, dir, "open.pem", ed, 0o644)
	malformed := writeFile(t, dir, "bad.pem", []byte("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n"), 0o600)
	notPEM := writeFile(t, dir, "text.pem", []byte("hello"), 0o600)
	tests := []struct {
		name     string
		cfg      signing.Config
		want     string // in the error, besides the file's name where one is at fault
		wantFile string
	}{
		{"malformed PEM", signing.Config{Algorithm: "EdDSA", KeyFiles: "a:EdDSA:" + malformed}, "malformed PKCS #8", malformed},
		{"no PEM", signing.Config{Algorithm: "EdDSA", KeyFiles: "a:EdDSA:" + notPEM}, "not one PEM block", notPEM},
		{"Ed25519 key for ES256", signing.Config{Algorithm: "ES256", KeyFiles: "a:ES256:" + ed1}, "cannot sign ES256", ed1},
		{"P-256 key for EdDSA", signing.Config{Algorithm: "EdDSA", KeyFiles: "a:EdDSA:" + ec1}, "cannot sign EdDSA", ec1},
		{"readable by others", signing.Config{Algorithm: "EdDSA", KeyFiles: "a:EdDSA:" + open}, "readable by others", open},
		{"two keys with one kid", signing.Config{Algorithm: "EdDSA", KeyFiles: "a:EdDSA:" + ed1 + ",a:ES256:" + ec1}, `two keys have kid "a"`, ""},
		{"RS256", signing.Config{Algorithm: "RS256", KeyDir: dir}, `algorithm "RS256"`, ""},
		{"missing file", signing.Config{Algorithm: "EdDSA", KeyFiles: "a:EdDSA:" + filepath.Join(dir, "none.pem")}, "no such file", "none.pem"},
		{"entry without alg", signing.Config{Algorithm: "EdDSA", KeyFiles: "a:" + ed1}, "want kid:alg:path", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Poll = time.Second
			_, err := signing.New(tt.cfg, signing.Deps{Store: openStore(t), Log: slog.New(slog.DiscardHandler)})
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.wantFile) {
				t.Fatalf("New() = %v; want an error with %q and %q", err, tt.want, tt.wantFile)
			}
		})
	}
}

// TestNoSigningKey: HS256 without a secret starts nothing. A gateway whose
// keys were all retired (its fallback key, say) gets a new key in its key
// directory, published before it signs, at start and at a refresh; with
// key files it cannot start, and a running one stops issuing.
func TestNoSigningKey(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	r, err := signing.New(signing.Config{Algorithm: "HS256", KeyDir: t.TempDir(), Poll: time.Second},
		signing.Deps{Store: s, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err == nil || !strings.Contains(err.Error(), "no secret") {
		t.Fatalf("HS256 without a secret: Start() = %v; want an error", err)
	}
	fleet := newKeyring(t, s, signing.Config{Algorithm: "ES256", KeyDir: t.TempDir()})
	fleetKid, _ := fleet.Current().Signer()
	dir := t.TempDir()
	own := newKeyring(t, s, signing.Config{Algorithm: "ES256", KeyDir: dir}) // signs with its own key: the fallback
	ownKid, _ := own.Current().Signer()
	if ownKid == fleetKid {
		t.Fatal("two key directories share a key")
	}
	retire(t, s, ownKid)
	refresh(t, own)
	newKid, _ := own.Current().Signer()
	if newKid == "" || newKid == ownKid || !published(t, s, newKid) {
		t.Fatalf("after its key was retired the gateway signs with %q; want a new, published key", newKid)
	}
	if _, err := own.Current().Sign(jwt.MapClaims{"sub": "1"}); err != nil {
		t.Fatal(err)
	}
	// With key files, a retired key is not replaced.
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	files := "mine:EdDSA:" + writePEM(t, t.TempDir(), "mine.pem", priv, 0o600)
	fixed := newKeyring(t, s, signing.Config{Algorithm: "EdDSA", KeyFiles: files})
	retire(t, s, "mine")
	refresh(t, fixed)
	if _, err := fixed.Current().Sign(jwt.MapClaims{"sub": "1"}); err == nil {
		t.Fatal("a gateway whose only key file was retired still signs")
	}
	r, err = signing.New(signing.Config{Algorithm: "EdDSA", KeyFiles: files, Poll: time.Second}, signing.Deps{Store: s, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err == nil || !strings.Contains(err.Error(), "no published key of this gateway can sign") {
		t.Fatalf("only key file retired: Start() = %v; want an error", err)
	}
}

func retire(t *testing.T, s *sqlite.Store, kid string) {
	t.Helper()
	if _, err := s.RetireSigningKey(context.Background(), kid, time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("retire %s: %v", kid, err)
	}
}

func published(t *testing.T, s *sqlite.Store, kid string) bool {
	t.Helper()
	keys, err := s.SigningKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.ID == kid {
			return true
		}
	}
	return false
}

// TestKeyfuncPinsEachKeysAlgorithm: a token verifies only with the key its
// kid names, under that key's algorithm.
func TestKeyfuncPinsEachKeysAlgorithm(t *testing.T) {
	s := openStore(t)
	hmacKey := signing.HMACKey{ID: "hs", Secret: []byte(strings.Repeat("s", 32))}
	ecRing := newKeyring(t, s, signing.Config{Algorithm: "ES256", KeyDir: t.TempDir()})
	ecKid, _ := ecRing.Current().Signer()
	r := newKeyring(t, s, signing.Config{Algorithm: "EdDSA", KeyDir: t.TempDir()}, hmacKey)
	set := r.Current()
	edKid, _ := set.Signer()
	keys, _ := s.SigningKeys(context.Background())
	var edPublic []byte
	for _, k := range keys {
		if k.ID == edKid {
			edPublic = k.PublicKey
		}
	}
	edPub, _ := x509.ParsePKIXPublicKey(edPublic)
	_, unpublished, _ := ed25519.GenerateKey(rand.Reader)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	claims := jwt.MapClaims{"sub": "1"}
	sign := func(m jwt.SigningMethod, kid any, key any) string {
		tok := jwt.NewWithClaims(m, claims)
		if kid != nil {
			tok.Header["kid"] = kid
		}
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	issued, err := set.Sign(claims)
	if err != nil {
		t.Fatal(err)
	}
	const (
		pinned  = "not the one its key pins"
		noKid   = "names no kid"
		unknown = "unknown kid"
	)
	tests := []struct {
		name    string
		token   string
		wantErr string // "": verifies
	}{
		{"issued EdDSA", issued, ""},
		{"HS256 under its own kid", sign(jwt.SigningMethodHS256, "hs", hmacKey.Secret), ""},
		{"alg confusion: HS256 keyed with the public key's DER", sign(jwt.SigningMethodHS256, edKid, edPublic), pinned},
		{"alg confusion: HS256 keyed with the raw public key", sign(jwt.SigningMethodHS256, edKid, []byte(edPub.(ed25519.PublicKey))), pinned},
		{"alg none", sign(jwt.SigningMethodNone, edKid, jwt.UnsafeAllowNoneSignatureType), pinned},
		{"unknown kid", sign(jwt.SigningMethodEdDSA, "nope", unpublished), unknown},
		{"missing kid", sign(jwt.SigningMethodEdDSA, nil, unpublished), noKid},
		{"missing kid, HS256", sign(jwt.SigningMethodHS256, nil, hmacKey.Secret), noKid},
		{"unpublished key under a published kid", sign(jwt.SigningMethodEdDSA, edKid, unpublished), "signature is invalid"},
		{"EdDSA under the ES256 key's kid", sign(jwt.SigningMethodEdDSA, ecKid, unpublished), pinned},
		{"RS256, not configured", sign(jwt.SigningMethodRS256, edKid, rsaKey), pinned},
		{"HS256 secret under an EdDSA kid", sign(jwt.SigningMethodHS256, edKid, hmacKey.Secret), pinned},
		{"EdDSA under the HS256 kid", sign(jwt.SigningMethodEdDSA, "hs", unpublished), pinned},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := jwt.Parse(tt.token, set.Keyfunc)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Parse() = %v; want it verified", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Parse() = %v; want an error with %q", err, tt.wantErr)
			}
		})
	}
}

func TestRotation(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	dir := t.TempDir()
	r := newKeyring(t, s, signing.Config{Algorithm: "EdDSA", KeyDir: dir})
	oldKid, _ := r.Current().Signer()
	oldToken, _ := r.Current().Sign(jwt.MapClaims{"sub": "1"})
	next, err := signing.GenerateKeyFile(dir, upstream.SigningAlgES256)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddSigningKey(ctx, upstream.SigningKey{ID: next.ID, Alg: next.Alg, PublicKey: next.Public}, time.Now()); err != nil {
		t.Fatal(err)
	}
	refresh(t, r)
	if kid, _ := r.Current().Signer(); kid != oldKid {
		t.Fatalf("a published key signs (%s) before it is activated", kid)
	}
	requireJWKS(t, r.Current(), sortedKids(oldKid, next.ID)...)
	if _, err := s.ActivateSigningKey(ctx, next.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	refresh(t, r)
	if kid, alg := r.Current().Signer(); kid != next.ID || alg != "ES256" {
		t.Fatalf("after activation %s/%s signs; want %s/ES256", kid, alg, next.ID)
	}
	if _, err := s.RetireSigningKey(ctx, oldKid, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	refresh(t, r)
	if _, err := jwt.Parse(oldToken, r.Current().Keyfunc); err != nil {
		t.Fatalf("a retired key's token before its time is up: %v", err)
	}
	if _, err := s.RetireSigningKey(ctx, next.ID, time.Now()); err == nil {
		t.Fatal("the signer was retired")
	}
	// Its time up (a retirement recorded in the past), the key is gone.
	if _, err := s.AddSigningKey(ctx, upstream.SigningKey{ID: "gone", Alg: next.Alg, PublicKey: next.Public}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RetireSigningKey(ctx, "gone", time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	refresh(t, r)
	requireJWKS(t, r.Current(), sortedKids(oldKid, next.ID)...)
}

func refresh(t *testing.T, r *signing.Keyring) {
	t.Helper()
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func sortedKids(a, b string) []string {
	if a > b {
		return []string{b, a}
	}
	return []string{a, b}
}

// TestBadStoredRowsAreLeftOut: a row another writer put in signing_keys
// that cannot verify (junk bytes, or a kid an HS256 key has) is left out,
// and the rest of the set still works on every gateway.
func TestBadStoredRowsAreLeftOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.db")
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	hmacKey := signing.HMACKey{ID: "hs", Secret: []byte(strings.Repeat("s", 32))}
	r := newKeyring(t, s, signing.Config{Algorithm: "ES256", KeyDir: t.TempDir()}, hmacKey)
	kid, _ := r.Current().Signer()
	keys, _ := s.SigningKeys(context.Background())
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO signing_keys (kid, alg, public_key, added_at) VALUES ('junk', 'EdDSA', x'01', 0), ('hs', 'ES256', ?, 0)`,
		keys[0].PublicKey); err != nil {
		t.Fatal(err)
	}
	refresh(t, r)
	requireJWKS(t, r.Current(), kid)
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "1"})
	hs.Header["kid"] = "hs"
	tok, _ := hs.SignedString(hmacKey.Secret)
	if _, err := jwt.Parse(tok, r.Current().Keyfunc); err != nil {
		t.Fatalf("the HS256 key after a stored row took its kid: %v", err)
	}
}

// TestRetiredKeyEndsWithoutARefresh: a retired key stops verifying at its
// time even while the store cannot be read.
func TestRetiredKeyEndsWithoutARefresh(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	r := newKeyring(t, s, signing.Config{Algorithm: "ES256", KeyDir: t.TempDir()})
	oldKid, _ := r.Current().Signer()
	tok, _ := r.Current().Sign(jwt.MapClaims{"sub": "1"})
	next := newKeyring(t, s, signing.Config{Algorithm: "ES256", KeyDir: t.TempDir()})
	nextKid, _ := next.Current().Signer()
	if _, err := s.ActivateSigningKey(ctx, nextKid, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RetireSigningKey(ctx, oldKid, time.Now().Add(100*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	refresh(t, r)
	if _, err := jwt.Parse(tok, r.Current().Keyfunc); err != nil {
		t.Fatalf("before its end: %v", err)
	}
	time.Sleep(200 * time.Millisecond) // past the end; no refresh since
	if _, err := jwt.Parse(tok, r.Current().Keyfunc); err == nil || !strings.Contains(err.Error(), "retired") {
		t.Fatalf("after its end: %v; want refused as retired", err)
	}
}
