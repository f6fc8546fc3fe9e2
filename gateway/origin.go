package gateway

import (
	"crypto/subtle"

	"github.com/gofiber/fiber/v2"
)

// originOr lets a request that carries the origin secret and no token
// read listings as the CDN (active ones only), and sends every other
// request to auth. A wrong secret is 401; the secret is compared in
// constant time.
func (s *Server) originOr(auth fiber.Handler) fiber.Handler {
	secret := []byte(s.cfg.CDN.OriginSecret)
	if len(secret) == 0 {
		return auth
	}
	header := s.cfg.CDN.OriginHeader
	return func(c *fiber.Ctx) error {
		given := c.Request().Header.Peek(header)
		// A visitor's token wins: the CDN sends the secret with every
		// fetch, and the owner of a passive listing must still see it.
		if given == nil || len(requestField(&c.Request().Header, fiber.HeaderAuthorization)) > 0 {
			return auth(c)
		}
		if subtle.ConstantTimeCompare(given, secret) != 1 {
			return errUnauthorized
		}
		c.Locals(principalKey{}, s.origin)
		return c.Next()
	}
}
