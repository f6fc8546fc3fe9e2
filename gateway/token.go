package gateway

import (
	"bytes"
	"hash/maphash"

	jwtware "github.com/gofiber/contrib/jwt"
	"github.com/gofiber/fiber/v2"
	"github.com/golang-jwt/jwt/v5"
)

const (
	// bearerChallenge answers a request that presented no bearer token;
	// invalidTokenChallenge one whose token was refused (RFC 6750 §3.1).
	// Neither says why: the reason is the server's to log and count.
	bearerChallenge       = `Bearer realm="realty"`
	invalidTokenChallenge = `Bearer realm="realty", error="invalid_token"`
	tokenKey              = "token"
)

// principalKey holds the request's *verifiedToken in its locals: a key of
// its own type compares cheaper than a string on every lookup.
type principalKey struct{}

// principal is who a verified token speaks for.
type principal struct {
	FirmID     int64
	FirmUserID int64
}

// Reasons for refusing a token, as AuthFailure counts them.
const (
	authMissing   = "missing"   // no Authorization header
	authMalformed = "malformed" // not "Bearer" 1*SP token68
	authInvalid   = "invalid"   // signature, key, or a claim other than exp
	authExpired   = "expired"
	authRevoked   = "revoked"
)

// errUnauthorized answers a request without a bearer token (none, or
// another scheme); errInvalidToken one whose bearer token was refused,
// whatever the reason: malformed, invalid, expired or revoked. Both have
// the same body: only the challenge tells them apart, as RFC 6750 §3.1
// asks.
var (
	errUnauthorized = &problem{status: fiber.StatusUnauthorized, detail: "A valid bearer token is required.",
		header: [2]string{fiber.HeaderWWWAuthenticate, bearerChallenge}}
	errInvalidToken = &problem{status: fiber.StatusUnauthorized, detail: errUnauthorized.detail,
		header: [2]string{fiber.HeaderWWWAuthenticate, invalidTokenChallenge}}
)

// refuse counts a refused token and answers errUnauthorized where no
// bearer token was presented, else errInvalidToken.
func (s *Server) refuse(reason string, header []byte) error {
	s.observer().AuthFailure(reason)
	if !presentsBearer(header) {
		return errUnauthorized
	}
	return errInvalidToken
}

// presentsBearer reports whether an Authorization header names the Bearer
// scheme, in any case (RFC 9110 §11.1), whatever follows it.
func presentsBearer(h []byte) bool {
	scheme, _, _ := bytes.Cut(h, []byte(" "))
	return bytes.EqualFold(scheme, []byte("Bearer"))
}

// requireToken checks the bearer token before anything else of a request.
func (s *Server) requireToken() fiber.Handler {
	verify := jwtware.New(jwtware.Config{
		// The key set in force names the key, pinned to its algorithm.
		KeyFunc:    func(t *jwt.Token) (any, error) { return s.tokenKeys.Current().Keyfunc(t) },
		Claims:     &checkedClaims{},
		ContextKey: tokenKey,
		ErrorHandler: func(c *fiber.Ctx, _ error) error {
			return s.refuse(authInvalid, requestField(&c.Request().Header, fiber.HeaderAuthorization))
		},
		SuccessHandler: s.acceptVerified,
	})
	return func(c *fiber.Ctx) error {
		header := requestField(&c.Request().Header, fiber.HeaderAuthorization)
		// A header equal to one that passed every check was well formed
		// then: only an unknown one is scanned. A remembered token is
		// checked against the revocations on every use, so that a token
		// verified a minute ago is refused once it is revoked.
		if v := s.remembered(c, header); v != nil && requestTime(c).UnixNano() < v.until {
			if s.isRevoked(v) {
				return s.refuse(authRevoked, header)
			}
			c.Locals(principalKey{}, v)
			return c.Next()
		}
		switch {
		case len(header) == 0:
			return s.refuse(authMissing, header)
		case !wellFormedBearer(header):
			return s.refuse(authMalformed, header)
		}
		return verify(c)
	}
}

// acceptVerified checks the claims of a token whose signature verified,
// remembers it, and lets the request on unless it is revoked.
func (s *Server) acceptVerified(c *fiber.Ctx) error {
	header := requestField(&c.Request().Header, fiber.HeaderAuthorization)
	tok, ok := c.Locals(tokenKey).(*jwt.Token)
	if !ok {
		return s.refuse(authInvalid, header)
	}
	now := requestTime(c)
	claims, ok := tok.Claims.(*checkedClaims)
	if !ok {
		return s.refuse(authInvalid, header)
	}
	if reason := s.checkClaims(claims, now); reason != "" {
		return s.refuse(reason, header)
	}
	v := &verifiedToken{
		header:    string(header),
		principal: principal{FirmID: claims.FirmID, FirmUserID: claims.FirmUserID},
		issuedMs:  claims.issuedMs(),
		until:     min(claims.ExpiresAt.time().Add(s.cfg.JWT.Leeway).UnixNano(), now.Add(verifiedTokenTTL).UnixNano()),
	}
	// Remembered even when revoked: the revocation is checked on every
	// use, and a revoked token sent again costs no signature.
	s.verified.Set(maphash.Bytes(s.tokenSeed, header), v)
	if pc, ok := c.Context().Conn().(*conn); ok {
		pc.token.Store(v)
	}
	if s.isRevoked(v) {
		return s.refuse(authRevoked, header)
	}
	c.Locals(principalKey{}, v)
	return c.Next()
}

// wellFormedBearer accepts "Bearer" 1*SP token68 (RFC 6750 §2.1), the
// scheme in any case (RFC 9110 §11.1: "bearer" and "BEARER" name it too):
// one or more spaces, no trailing blanks, only token68 characters.
func wellFormedBearer(h []byte) bool {
	const scheme = "Bearer "
	if len(h) <= len(scheme) || !bytes.EqualFold(h[:len(scheme)], []byte(scheme)) {
		return false
	}
	tok := bytes.TrimLeft(h[len(scheme):], " ")
	if len(tok) == 0 {
		return false
	}
	for _, b := range tok {
		if !token68[b] {
			return false
		}
	}
	return true
}

// token68 marks the bytes a token68 may hold.
var token68 = func() (t [256]bool) {
	for _, r := range "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/=" {
		t[r] = true
	}
	return t
}()

func principalOf(c *fiber.Ctx) principal {
	if v, ok := c.Locals(principalKey{}).(*verifiedToken); ok {
		return v.principal
	}
	return principal{}
}
