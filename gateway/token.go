package gateway

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	jwtware "github.com/gofiber/contrib/jwt"
	"github.com/gofiber/fiber/v2"
	"github.com/golang-jwt/jwt/v5"
	lru "github.com/hashicorp/golang-lru/v2"
)

const (
	signingAlg      = "HS256"
	bearerChallenge = `Bearer realm="realty"`
	principalKey    = "principal"
	tokenKey        = "token"
)

// SigningKey is one HS256 key; its ID goes in the token's kid header.
type SigningKey struct {
	ID     string
	Secret []byte
}

// principal is who a verified token speaks for.
type principal struct {
	FirmID     int64
	FirmUserID int64
}

// issuedClaims are the claims of a token this gateway issues.
type issuedClaims struct {
	jwt.RegisteredClaims
	FirmID     int64 `json:"firmId"`
	FirmUserID int64 `json:"firmUserId"`
}

func (s *Server) issueToken(firmID, userID int64, now time.Time) (string, error) {
	jti := make([]byte, 16)
	if _, err := rand.Read(jti); err != nil {
		return "", err
	}
	claims := issuedClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    s.cfg.JWT.Issuer,
			Subject:   strconv.FormatInt(userID, 10),
			Audience:  jwt.ClaimStrings{s.cfg.JWT.Audience},
			ExpiresAt: jwt.NewNumericDate(now.Add(s.cfg.JWT.TokenTTL)),
			NotBefore: jwt.NewNumericDate(now),
			IssuedAt:  jwt.NewNumericDate(now),
			ID:        hex.EncodeToString(jti),
		},
		FirmID:     firmID,
		FirmUserID: userID,
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	signer := s.keys[0]
	tok.Header["kid"] = signer.ID
	return tok.SignedString(signer.Secret)
}

// epochSeconds is a NumericDate that must be a JSON number: golang-jwt's
// own type also accepts numeric strings.
type epochSeconds float64

func (e *epochSeconds) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] == '"' {
		return errors.New("date is not a number")
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return err
	}
	if math.IsNaN(f) || math.Abs(f) > maxEpochSeconds {
		return errors.New("date out of range")
	}
	*e = epochSeconds(f)
	return nil
}

// maxEpochSeconds keeps dates far inside time.Time's range (year 33658).
const maxEpochSeconds = 1e12

func (e *epochSeconds) time() time.Time {
	sec, frac := math.Modf(float64(*e))
	return time.Unix(int64(sec), int64(frac*1e9))
}

// checkedClaims is what contrib/jwt parses a presented token into. Its time
// getters return nil so that golang-jwt's built-in check, which has no
// leeway through contrib/jwt v1, is skipped; Validate requires the claims
// and Server.checkClaims compares them with the configuration.
type checkedClaims struct {
	Issuer     string           `json:"iss"`
	Subject    string           `json:"sub"`
	Audience   jwt.ClaimStrings `json:"aud"`
	ExpiresAt  *epochSeconds    `json:"exp"`
	NotBefore  *epochSeconds    `json:"nbf"`
	IssuedAt   *epochSeconds    `json:"iat"`
	ID         string           `json:"jti"`
	FirmID     int64            `json:"firmId"`
	FirmUserID int64            `json:"firmUserId"`
}

var _ jwt.ClaimsValidator = (*checkedClaims)(nil)

func (*checkedClaims) GetExpirationTime() (*jwt.NumericDate, error) { return nil, nil }
func (*checkedClaims) GetIssuedAt() (*jwt.NumericDate, error)       { return nil, nil }
func (*checkedClaims) GetNotBefore() (*jwt.NumericDate, error)      { return nil, nil }
func (c *checkedClaims) GetIssuer() (string, error)                 { return c.Issuer, nil }
func (c *checkedClaims) GetSubject() (string, error)                { return c.Subject, nil }
func (c *checkedClaims) GetAudience() (jwt.ClaimStrings, error)     { return c.Audience, nil }

// Validate requires every claim the gateway relies on.
func (c *checkedClaims) Validate() error {
	switch {
	case c.ExpiresAt == nil:
		return errors.New("exp is required")
	case c.Issuer == "" || len(c.Audience) == 0:
		return errors.New("iss and aud are required")
	case c.FirmID <= 0 || c.FirmUserID <= 0:
		return errors.New("firmId and firmUserId are required")
	case c.Subject != strconv.FormatInt(c.FirmUserID, 10):
		return errors.New("sub does not match firmUserId")
	}
	return nil
}

// checkClaims applies the configured issuer, audience and leeway.
func (s *Server) checkClaims(c *checkedClaims, now time.Time) error {
	switch {
	case c.Issuer != s.cfg.JWT.Issuer:
		return errors.New("wrong issuer")
	case !slices.Contains(c.Audience, s.cfg.JWT.Audience):
		return errors.New("wrong audience")
	case !now.Before(c.ExpiresAt.time().Add(s.cfg.JWT.Leeway)):
		return errors.New("token expired")
	case c.NotBefore != nil && now.Before(c.NotBefore.time().Add(-s.cfg.JWT.Leeway)):
		return errors.New("token not yet valid")
	}
	return nil
}

var errUnauthorized = &problem{status: fiber.StatusUnauthorized, detail: "A valid bearer token is required."}

// requireToken checks the bearer token before anything else of a request.
func (s *Server) requireToken() fiber.Handler {
	keys := make(map[string]jwtware.SigningKey, len(s.keys))
	for _, k := range s.keys {
		keys[k.ID] = jwtware.SigningKey{JWTAlg: signingAlg, Key: k.Secret}
	}
	verify := jwtware.New(jwtware.Config{
		SigningKeys: keys,
		Claims:      &checkedClaims{},
		ContextKey:  tokenKey,
		ErrorHandler: func(_ *fiber.Ctx, _ error) error {
			return errUnauthorized
		},
		SuccessHandler: func(c *fiber.Ctx) error {
			tok, ok := c.Locals(tokenKey).(*jwt.Token)
			if !ok {
				return errUnauthorized
			}
			claims, ok := tok.Claims.(*checkedClaims)
			if !ok || s.checkClaims(claims, time.Now()) != nil {
				return errUnauthorized
			}
			p := principal{FirmID: claims.FirmID, FirmUserID: claims.FirmUserID}
			until := claims.ExpiresAt.time().Add(s.cfg.JWT.Leeway)
			if limit := time.Now().Add(verifiedTokenTTL); limit.Before(until) {
				until = limit
			}
			s.verified.Add(sha256.Sum256(c.Request().Header.Peek(fiber.HeaderAuthorization)),
				verifiedToken{principal: p, until: until})
			c.Locals(principalKey, p)
			return c.Next()
		},
	})
	return func(c *fiber.Ctx) error {
		header := c.Request().Header.Peek(fiber.HeaderAuthorization)
		if !wellFormedBearer(header) {
			return errUnauthorized
		}
		if v, ok := s.verified.Get(sha256.Sum256(header)); ok && time.Now().Before(v.until) {
			c.Locals(principalKey, v.principal)
			return c.Next()
		}
		return verify(c)
	}
}

// verifiedToken is a token that passed every check, remembered so that the
// next request with it skips the signature and the claims: the same bytes
// give the same answer until the token expires. Only valid tokens are kept,
// keyed by the digest of the whole header.
type verifiedToken struct {
	principal principal
	until     time.Time
}

// Bounds of the verified-token memory.
const (
	verifiedTokens   = 50_000
	verifiedTokenTTL = time.Minute
)

func newVerifiedTokens() *lru.Cache[[sha256.Size]byte, verifiedToken] {
	c, err := lru.New[[sha256.Size]byte, verifiedToken](verifiedTokens)
	if err != nil {
		panic(err) // only for a size below one
	}
	return c
}

// wellFormedBearer accepts exactly "Bearer <token68>" (RFC 6750 §2.1):
// one space, no trailing blanks, only token68 characters.
func wellFormedBearer(h []byte) bool {
	tok, ok := bytes.CutPrefix(h, []byte("Bearer "))
	if !ok || len(tok) == 0 {
		return false
	}
	return !slices.ContainsFunc(tok, func(b byte) bool {
		return !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || strings.IndexByte("-._~+/=", b) >= 0)
	})
}

func principalOf(c *fiber.Ctx) principal {
	p, _ := c.Locals(principalKey).(principal)
	return p
}
