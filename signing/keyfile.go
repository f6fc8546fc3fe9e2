package signing

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/realty-gateway/gateway/upstream"
)

// LocalKey is a private key this gateway holds, with what the store
// publishes of it.
type LocalKey struct {
	ID      string
	Alg     string
	File    string
	Private crypto.Signer
	// Public is the public half in PKIX DER, as the store keeps it.
	Public []byte
}

// published is the key as the store's key set holds it.
func (k LocalKey) published() upstream.SigningKey {
	return upstream.SigningKey{ID: k.ID, Alg: k.Alg, PublicKey: k.Public}
}

// ReadKeyFile reads a PEM private key (PKCS #8, or SEC 1 for P-256) that
// must be of alg's type and readable by its owner alone. kid "" takes the
// key's RFC 7638 thumbprint.
func ReadKeyFile(path, kid, alg string) (LocalKey, error) {
	fail := func(err error) (LocalKey, error) { return LocalKey{}, fmt.Errorf("key file %s: %w", path, err) }
	info, err := os.Stat(path)
	if err != nil {
		return fail(err)
	}
	if info.Mode().Perm()&0o077 != 0 {
		return fail(fmt.Errorf("readable by others (mode %04o); chmod 600 it", info.Mode().Perm()))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fail(err)
	}
	priv, err := parsePrivateKey(b)
	if err != nil {
		return fail(err)
	}
	k, err := newLocalKey(priv, kid, alg)
	if err != nil {
		return fail(err)
	}
	k.File = path
	return k, nil
}

func parsePrivateKey(b []byte) (crypto.Signer, error) {
	block, rest := pem.Decode(b)
	if block == nil || len(strings.TrimSpace(string(rest))) != 0 {
		return nil, errors.New("not one PEM block")
	}
	switch block.Type {
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("malformed PKCS #8 key: %w", err)
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("unsupported key type %T", k)
		}
		return s, nil
	case "EC PRIVATE KEY":
		k, err := x509.ParseECPrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("malformed EC key: %w", err)
		}
		return k, nil
	}
	return nil, fmt.Errorf("PEM block %q is no private key (want PRIVATE KEY or EC PRIVATE KEY)", block.Type)
}

// newLocalKey checks that priv is of alg's type: Ed25519 for EdDSA, ECDSA
// on P-256 for ES256.
func newLocalKey(priv crypto.Signer, kid, alg string) (LocalKey, error) {
	switch k := priv.(type) {
	case ed25519.PrivateKey:
		if alg != upstream.SigningAlgEdDSA {
			return LocalKey{}, fmt.Errorf("an Ed25519 key cannot sign %s", alg)
		}
	case *ecdsa.PrivateKey:
		if alg != upstream.SigningAlgES256 || k.Curve != elliptic.P256() {
			return LocalKey{}, fmt.Errorf("an ECDSA %s key cannot sign %s", k.Curve.Params().Name, alg)
		}
	default:
		return LocalKey{}, fmt.Errorf("a %T key cannot sign %s (want Ed25519 for EdDSA, P-256 for ES256)", priv, alg)
	}
	pub, err := x509.MarshalPKIXPublicKey(priv.Public())
	if err != nil {
		return LocalKey{}, err
	}
	if kid == "" {
		if kid, err = thumbprint(priv.Public()); err != nil {
			return LocalKey{}, err
		}
	}
	return LocalKey{ID: kid, Alg: alg, Private: priv, Public: pub}, nil
}

// GenerateKeyFile makes a key for alg and writes it into dir as
// <kid>.pem, mode 0600, whole or not at all.
func GenerateKeyFile(dir, alg string) (LocalKey, error) {
	priv, err := generate(alg)
	if err != nil {
		return LocalKey{}, err
	}
	k, err := newLocalKey(priv, "", alg)
	if err != nil {
		return LocalKey{}, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return LocalKey{}, err
	}
	k.File = filepath.Join(dir, k.ID+".pem")
	if err := writeNew(k.File, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})); err != nil {
		return LocalKey{}, fmt.Errorf("key file %s: %w", k.File, err)
	}
	return k, nil
}

func generate(alg string) (crypto.Signer, error) {
	switch alg {
	case upstream.SigningAlgEdDSA:
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		return priv, err
	case upstream.SigningAlgES256:
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	return nil, fmt.Errorf("cannot generate a key for %q (want EdDSA or ES256)", alg)
}

// writeNew writes b to path through a temporary file linked into place, so
// that no process reads a half-written key.
func writeNew(path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".key-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(b)
	if err := errors.Join(werr, tmp.Chmod(0o600), tmp.Close()); err != nil {
		return err
	}
	return os.Link(tmp.Name(), path)
}

// thumbprint is the key's RFC 7638 JWK thumbprint: SHA-256 over its
// required members in lexical order, base64url.
func thumbprint(pub crypto.PublicKey) (string, error) {
	j, err := publicJWK(pub)
	if err != nil {
		return "", err
	}
	required := map[string]string{"kty": j.Kty, "crv": j.Crv, "x": j.X}
	if j.Y != "" {
		required["y"] = j.Y
	}
	b, err := json.Marshal(required) // maps marshal in key order
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}
