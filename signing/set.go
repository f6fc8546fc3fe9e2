package signing

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/realty-gateway/gateway/upstream"
)

// AlgHS256 names the symmetric algorithm; the asymmetric ones are
// upstream.SigningAlgEdDSA and upstream.SigningAlgES256.
const AlgHS256 = "HS256"

// HMACKey is an HS256 secret with its kid, from the configuration.
type HMACKey struct {
	ID     string
	Secret []byte
}

// KeySet is one snapshot of the keys that verify, the one that signs, and
// the JWKS that publishes them. It is never changed once built.
type KeySet struct {
	verifiers map[string]verifier
	signer    signer
	jwks      []byte
	etag      string
	// fallback is set where this gateway does not hold the key the fleet
	// made signer, and signs with one of its own published keys instead.
	fallback string
}

type verifier struct {
	method jwt.SigningMethod
	key    any // []byte, ed25519.PublicKey or *ecdsa.PublicKey
	// until is when a retired key stops verifying, checked at each use so
	// that it holds while the store cannot be read; zero: no end.
	until time.Time
}

type signer struct {
	id     string
	method jwt.SigningMethod
	key    any // []byte, ed25519.PrivateKey or *ecdsa.PrivateKey
}

// Errors of Keyfunc and Sign; never sent to a client.
var (
	errNoKid      = errors.New("token names no kid")
	errUnknownKid = errors.New("token names an unknown kid")
	errWrongAlg   = errors.New("token's alg is not the one its key pins")
	errRetired    = errors.New("token's key was retired, and its last token has expired")
	errNoSigner   = errors.New("no key of this gateway can sign")
)

// Keyfunc gives golang-jwt the key that the token's kid names, only when
// the token's alg is the one that key pins: an HS256 token under an
// asymmetric key's kid, or "none", is refused before any signature check.
// Every token this gateway issues names its key, so a token without a kid
// is refused, with one key as with several.
func (s *KeySet) Keyfunc(t *jwt.Token) (any, error) {
	kid, ok := t.Header["kid"].(string)
	if !ok {
		return nil, errNoKid
	}
	v, ok := s.verifiers[kid]
	if !ok {
		return nil, errUnknownKid
	}
	if t.Method == nil || t.Method.Alg() != v.method.Alg() {
		return nil, errWrongAlg
	}
	if !v.until.IsZero() && !time.Now().Before(v.until) {
		return nil, errRetired
	}
	return v.key, nil
}

// Sign signs claims with the signing key, naming it in kid. It fails
// where this gateway holds no key that may sign.
func (s *KeySet) Sign(claims jwt.Claims) (string, error) {
	if s.signer.method == nil {
		return "", errNoSigner
	}
	t := jwt.NewWithClaims(s.signer.method, claims)
	t.Header["kid"] = s.signer.id
	return t.SignedString(s.signer.key)
}

// Signer names the key that signs and its algorithm; "" where none may.
func (s *KeySet) Signer() (kid, alg string) {
	if s.signer.method == nil {
		return "", ""
	}
	return s.signer.id, s.signer.method.Alg()
}

// JWKS is the JSON Web Key Set of the asymmetric keys in force, and its
// strong entity tag.
func (s *KeySet) JWKS() (body []byte, etag string) { return s.jwks, s.etag }

// buildKeySet makes the snapshot: the HS256 keys and the store's keys in
// force at now verify; the signer is the first HS256 key under HS256, else
// the store's signer where held locally (see chooseSigner). A stored key
// that cannot verify (unreadable, of the wrong type, or under an HS256
// key's kid) is left out and returned in skipped, so that one bad row
// stops no gateway. Without a key that may sign, the set verifies and
// Sign fails.
func buildKeySet(alg string, hmacs []HMACKey, stored []upstream.SigningKey, local map[string]LocalKey, now time.Time) (s *KeySet, skipped []error, err error) {
	s = &KeySet{verifiers: make(map[string]verifier, len(hmacs)+len(stored))}
	for _, h := range hmacs {
		if _, dup := s.verifiers[h.ID]; dup {
			return nil, nil, fmt.Errorf("two keys have kid %q", h.ID)
		}
		s.verifiers[h.ID] = verifier{method: jwt.SigningMethodHS256, key: h.Secret}
	}
	set := JWKSet{Keys: []JWK{}}
	var inForce []upstream.SigningKey
	for _, k := range stored {
		if k.Retired() && !now.Before(k.VerifiesUntil) {
			continue
		}
		v, jwk, err := storedVerifier(k)
		if _, dup := s.verifiers[k.ID]; dup && err == nil {
			err = fmt.Errorf("stored key %q: an HS256 key has its kid", k.ID)
		}
		if err != nil {
			skipped = append(skipped, err)
			continue
		}
		s.verifiers[k.ID] = v
		set.Keys = append(set.Keys, jwk)
		inForce = append(inForce, k)
	}
	if s.jwks, err = json.Marshal(set); err != nil {
		return nil, nil, fmt.Errorf("jwks: %w", err)
	}
	sum := sha256.Sum256(s.jwks)
	s.etag = `"` + base64.RawURLEncoding.EncodeToString(sum[:18]) + `"`
	if alg == AlgHS256 {
		if len(hmacs) == 0 {
			return nil, nil, errors.New("HS256 signs, but no secret is configured")
		}
		s.signer = signer{id: hmacs[0].ID, method: jwt.SigningMethodHS256, key: hmacs[0].Secret}
		return s, skipped, nil
	}
	s.chooseSigner(inForce, local)
	return s, skipped, nil
}

// chooseSigner takes the fleet's signer where this gateway holds it. Where
// it does not (its file has not reached this gateway yet), the gateway
// signs with the local key made signer last, else the one added last:
// every local key is published at start, so its tokens verify everywhere.
// A local key counts only where it is the stored key itself.
func (s *KeySet) chooseSigner(inForce []upstream.SigningKey, local map[string]LocalKey) {
	held := func(k upstream.SigningKey) bool {
		l, ok := local[k.ID]
		return ok && l.Alg == k.Alg && bytes.Equal(l.Public, k.PublicKey) && !k.Retired()
	}
	active, ok := upstream.ActiveSigningKey(inForce)
	if ok && held(active) {
		s.signer = localSigner(local[active.ID])
		return
	}
	var best upstream.SigningKey
	for _, k := range inForce {
		if !held(k) {
			continue
		}
		if best.ID == "" || k.SignsFrom.After(best.SignsFrom) || (k.SignsFrom.Equal(best.SignsFrom) && k.AddedAt.After(best.AddedAt)) {
			best = k
		}
	}
	if best.ID == "" {
		return
	}
	s.signer = localSigner(local[best.ID])
	if ok {
		s.fallback = active.ID
	}
}

func localSigner(l LocalKey) signer {
	m := jwt.SigningMethod(jwt.SigningMethodEdDSA)
	if l.Alg == upstream.SigningAlgES256 {
		m = jwt.SigningMethodES256
	}
	return signer{id: l.ID, method: m, key: l.Private}
}

// storedVerifier parses a stored public key, which must be of the type its
// pinned algorithm takes.
func storedVerifier(k upstream.SigningKey) (verifier, JWK, error) {
	pub, err := x509.ParsePKIXPublicKey(k.PublicKey)
	if err != nil {
		return verifier{}, JWK{}, fmt.Errorf("stored key %q: %w", k.ID, err)
	}
	var v verifier
	switch p := pub.(type) {
	case ed25519.PublicKey:
		v = verifier{method: jwt.SigningMethodEdDSA, key: p}
	case *ecdsa.PublicKey:
		if p.Curve != elliptic.P256() {
			return verifier{}, JWK{}, fmt.Errorf("stored key %q: curve %s", k.ID, p.Curve.Params().Name)
		}
		v = verifier{method: jwt.SigningMethodES256, key: p}
	default:
		return verifier{}, JWK{}, fmt.Errorf("stored key %q: unsupported type %T", k.ID, pub)
	}
	if v.method.Alg() != k.Alg {
		return verifier{}, JWK{}, fmt.Errorf("stored key %q: a %T key cannot verify %s", k.ID, pub, k.Alg)
	}
	jwk, err := publicJWK(pub)
	if err != nil {
		return verifier{}, JWK{}, err
	}
	jwk.Kid, jwk.Alg, jwk.Use = k.ID, k.Alg, "sig"
	v.until = k.VerifiesUntil
	return v, jwk, nil
}

// NewStatic builds a KeySet of HS256 keys alone: the first signs.
func NewStatic(keys []HMACKey) (*KeySet, error) {
	s, _, err := buildKeySet(AlgHS256, keys, nil, nil, time.Time{})
	return s, err
}
