package gateway

import (
	"hash/maphash"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/maypok86/otter/v2"
)

// remembered is the verified token whose header is header: the one last
// verified on the request's connection (see Listener), else one from the
// shared memory, which the connection then remembers. nil: none. Two
// layers, because a keep-alive client sends one header on every request:
// the connection's skips the shared memory's hash and lookup
// (BenchmarkTokenMemoLayers, docs/performance.md).
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
