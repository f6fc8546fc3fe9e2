package gateway

import (
	"fmt"

	"github.com/gofiber/fiber/v2"
)

// The issuer's public document: anyone may read it, with no token. It is
// the only one: no OpenID Connect Discovery document is served, since its
// REQUIRED members would be untrue here (an authorization endpoint, RS256
// among the algorithms); verifiers are given the JWKS's URL (docs/security.md).
const (
	jwksPath = "/.well-known/jwks.json"
	// jwkSetMediaType is RFC 7517 §8.5's.
	jwkSetMediaType = "application/jwk-set+json"
)

// publishedKeys are the JWKS in each coding, made on the first request
// after the published keys changed (a poll that read the same keys
// changes nothing here).
type publishedKeys struct {
	etag string // the key set's
	doc  documentVariants
}

// publishKeys serves the JWKS of the asymmetric keys in force (RFC 7517,
// RFC 8037): public members only, never an HS256 secret. Edges cache it for
// http.jwt.jwksMaxAge, which is why a new key is published that long
// before it signs.
func (s *Server) publishKeys(c *fiber.Ctx) error {
	body, etag := s.tokenKeys.Current().JWKS()
	p := s.jwks.Load()
	if p == nil || p.etag != etag {
		doc, err := newDocumentVariants(s.docs.compressor, body)
		if err != nil {
			return fmt.Errorf("jwks: %w", err)
		}
		p = &publishedKeys{etag: etag, doc: doc}
		s.jwks.Store(p)
	}
	return serveDocument(c, &p.doc, jwkSetMediaType, s.jwksCacheControl)
}
