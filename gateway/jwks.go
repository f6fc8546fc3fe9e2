package gateway

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/realty-gateway/gateway/coding"
)

// The issuer's public documents: anyone may read them, with no token.
const (
	jwksPath                = "/.well-known/jwks.json"
	openIDConfigurationPath = "/.well-known/openid-configuration"
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

// openIDConfiguration serves the issuer's metadata (OpenID Connect
// Discovery §3, the members a verifier reads) where the issuer is an https
// URL: jwks_uri is then the issuer's own, never built from a request's
// Host. Any other issuer answers 404.
func (s *Server) openIDConfiguration(c *fiber.Ctx) error {
	if s.docs.openID == nil {
		return fiber.ErrNotFound
	}
	return serveDocument(c, s.docs.openID, fiber.MIMEApplicationJSON, s.jwksCacheControl)
}

// newOpenIDDocument is the metadata document of issuer; nil where the
// issuer is no https URL.
func newOpenIDDocument(z *coding.Compressor, issuer string) (*documentVariants, error) {
	if !strings.HasPrefix(issuer, "https://") {
		return nil, nil
	}
	body, err := json.Marshal(map[string]any{
		"issuer":                                issuer,
		"jwks_uri":                              strings.TrimSuffix(issuer, "/") + jwksPath,
		"id_token_signing_alg_values_supported": []string{"EdDSA", "ES256"},
	})
	if err != nil {
		return nil, err
	}
	doc, err := newDocumentVariants(z, body)
	if err != nil {
		return nil, fmt.Errorf("openid-configuration: %w", err)
	}
	return &doc, nil
}
