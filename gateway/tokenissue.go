package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

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
