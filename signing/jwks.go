package signing

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"encoding/base64"
	"fmt"
)

// JWK is a public key as RFC 7517 and RFC 8037 write it. It has no member
// for a private part.
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y,omitempty"`
	Kid string `json:"kid,omitempty"`
	Alg string `json:"alg,omitempty"`
	Use string `json:"use,omitempty"`
}

// JWKSet is the document served at /.well-known/jwks.json.
type JWKSet struct {
	Keys []JWK `json:"keys"`
}

func publicJWK(pub crypto.PublicKey) (JWK, error) {
	b64 := base64.RawURLEncoding.EncodeToString
	switch k := pub.(type) {
	case ed25519.PublicKey:
		return JWK{Kty: "OKP", Crv: "Ed25519", X: b64(k)}, nil
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			break
		}
		point, err := k.Bytes() // 0x04 || x || y
		if err != nil {
			return JWK{}, err
		}
		return JWK{Kty: "EC", Crv: "P-256", X: b64(point[1:33]), Y: b64(point[33:])}, nil
	}
	return JWK{}, fmt.Errorf("no JWK for a %T key", pub)
}
