package gateway

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	jwtware "github.com/gofiber/contrib/jwt"
	"github.com/gofiber/fiber/v2"
	"github.com/golang-jwt/jwt/v5"
	"github.com/maypok86/otter/v2"

	"github.com/realty-gateway/gateway/signing"
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

// SigningKey is one HS256 key; its ID goes in the token's kid header.
type SigningKey = signing.HMACKey

// TokenKeys are the keys that sign and verify tokens: a *signing.Keyring,
// or StaticKeys of the configured HS256 secrets.
type TokenKeys interface {
	// Current is the key set in force; it is read once per use.
	Current() *signing.KeySet
	// DeploymentSecret is shared by the deployment's gateways.
	DeploymentSecret() []byte
}

// StaticKeys are HS256 keys that never change: the first signs.
type StaticKeys struct {
	set    *signing.KeySet
	secret []byte
}

// NewStaticKeys builds StaticKeys of keys.
func NewStaticKeys(keys []SigningKey) (*StaticKeys, error) {
	set, err := signing.NewStatic(keys)
	if err != nil {
		return nil, err
	}
	return &StaticKeys{set: set, secret: keys[len(keys)-1].Secret}, nil
}

func (k *StaticKeys) Current() *signing.KeySet { return k.set }
func (k *StaticKeys) DeploymentSecret() []byte { return k.secret }

// principal is who a verified token speaks for.
type principal struct {
	FirmID     int64
	FirmUserID int64
}

// issuedClaims are the claims of a token this gateway issues. iat has
// one-second resolution (RFC 7519 NumericDate, as golang-jwt writes it);
// iatMs is the same time in milliseconds, so that a revocation compares
// exactly (see issuedMs).
type issuedClaims struct {
	jwt.RegisteredClaims
	IssuedAtMs int64 `json:"iatMs"`
	FirmID     int64 `json:"firmId"`
	FirmUserID int64 `json:"firmUserId"`
}

// issueToken issues a token at now: the time the login arrived, before the
// firm and the user were read, so that a login that read them before a
// revocation was recorded issues a token that the revocation covers.
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
		IssuedAtMs: now.UnixMilli(),
		FirmID:     firmID,
		FirmUserID: userID,
	}
	return s.tokenKeys.Current().Sign(claims)
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
	IssuedAtMs *int64           `json:"iatMs"`
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
	case c.IssuedAt == nil:
		return errors.New("iat is required")
	case c.Issuer == "" || len(c.Audience) == 0:
		return errors.New("iss and aud are required")
	case c.FirmID <= 0 || c.FirmUserID <= 0:
		return errors.New("firmId and firmUserId are required")
	case c.Subject != strconv.FormatInt(c.FirmUserID, 10):
		return errors.New("sub does not match firmUserId")
	}
	return nil
}

// issuedMs is when the token was issued, in milliseconds since 1970, as a
// revocation compares it: iatMs when it lies within iat's second (tokens of
// this gateway), else the start of iat's second. A revocation at T refuses
// a token issued at or before T, so a token with only iat, issued in T's
// second, is refused, and one issued in a later second is not.
func (c *checkedClaims) issuedMs() int64 {
	sec := int64(math.Floor(float64(*c.IssuedAt)))
	ms := sec * 1000
	if c.IssuedAtMs != nil && *c.IssuedAtMs >= ms && *c.IssuedAtMs < ms+1000 {
		return *c.IssuedAtMs
	}
	return ms
}

// Reasons for refusing a token, as AuthFailure counts them.
const (
	authMissing   = "missing"   // no Authorization header
	authMalformed = "malformed" // not "Bearer" 1*SP token68
	authInvalid   = "invalid"   // signature, key, or a claim other than exp
	authExpired   = "expired"
	authRevoked   = "revoked"
)

// checkClaims applies the configured issuer, audience and leeway, and
// returns the reason for refusing the token, or "".
func (s *Server) checkClaims(c *checkedClaims, now time.Time) string {
	switch {
	case c.Issuer != s.cfg.JWT.Issuer, !slices.Contains(c.Audience, s.cfg.JWT.Audience):
		return authInvalid
	case !now.Before(c.ExpiresAt.time().Add(s.cfg.JWT.Leeway)):
		return authExpired
	case c.NotBefore != nil && now.Before(c.NotBefore.time().Add(-s.cfg.JWT.Leeway)):
		return authInvalid
	}
	return ""
}

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
			return s.refuse(authInvalid, c.Request().Header.Peek(fiber.HeaderAuthorization))
		},
		SuccessHandler: s.acceptVerified,
	})
	return func(c *fiber.Ctx) error {
		header := c.Request().Header.Peek(fiber.HeaderAuthorization)
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
	header := c.Request().Header.Peek(fiber.HeaderAuthorization)
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
		if given == nil || len(c.Request().Header.Peek(fiber.HeaderAuthorization)) > 0 {
			return auth(c)
		}
		if subtle.ConstantTimeCompare(given, secret) != 1 {
			return errUnauthorized
		}
		c.Locals(principalKey{}, s.origin)
		return c.Next()
	}
}

// remembered is the verified token whose header is header: the one last
// verified on the request's connection (see Listener), else one from the
// shared memory, which the connection then remembers. nil: none.
func (s *Server) remembered(c *fiber.Ctx, header []byte) *verifiedToken {
	pc, _ := c.Context().Conn().(*conn)
	if pc != nil {
		if v := pc.token.Load(); v != nil && v.header == string(header) {
			return v
		}
	}
	v, ok := s.verified.GetIfPresent(maphash.Bytes(s.tokenSeed, header))
	if !ok || v.header != string(header) {
		return nil
	}
	if pc != nil {
		pc.token.Store(v)
	}
	return v
}

// isRevoked checks v against the revocations in force. A token found not
// revoked remembers their generation, so that its next uses skip the
// lookup until a revocation comes or goes.
func (s *Server) isRevoked(v *verifiedToken) bool {
	gen := s.revoked.Generation()
	if v.notRevokedAt.Load() == gen {
		return false
	}
	if s.revoked.Revoked(v.principal.FirmID, v.principal.FirmUserID, v.issuedMs) {
		return true
	}
	v.notRevokedAt.Store(gen)
	return false
}

// verifiedToken is a token that passed every check, remembered so that the
// next request with it skips the signature and the claims: the same bytes
// give the same answer until the token expires. Only valid tokens are
// kept, under a keyed 64-bit hash of the whole header; the header itself is
// compared too, so a hash collision is a miss, never another's principal.
type verifiedToken struct {
	header    string
	principal principal
	issuedMs  int64 // see checkedClaims.issuedMs
	until     int64 // unix nanoseconds
	// notRevokedAt is the generation of the revocations at which the
	// token was last found not revoked; 0: never.
	notRevokedAt atomic.Uint64
}

// Bounds of the verified-token memory.
const (
	verifiedTokens   = 50_000
	verifiedTokenTTL = time.Minute
)

func newVerifiedTokens() *otter.Cache[uint64, *verifiedToken] {
	return otter.Must(&otter.Options[uint64, *verifiedToken]{MaximumSize: verifiedTokens})
}

// requestTime is when the request arrived, read once by the server.
func requestTime(c *fiber.Ctx) time.Time {
	if t := c.Context().Time(); !t.IsZero() {
		return t
	}
	return time.Now() // a handler driven without a server, as in benchmarks
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
