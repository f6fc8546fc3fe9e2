package gateway

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

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

func (*checkedClaims) GetIssuedAt() (*jwt.NumericDate, error) { return nil, nil }

func (*checkedClaims) GetNotBefore() (*jwt.NumericDate, error) { return nil, nil }

func (c *checkedClaims) GetIssuer() (string, error) { return c.Issuer, nil }

func (c *checkedClaims) GetSubject() (string, error) { return c.Subject, nil }

func (c *checkedClaims) GetAudience() (jwt.ClaimStrings, error) { return c.Audience, nil }

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
