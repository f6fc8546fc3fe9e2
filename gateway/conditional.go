package gateway

import (
	"bytes"
	"net/http"
	"slices"

	"github.com/gofiber/fiber/v2"

	"github.com/realty-gateway/gateway/coding"
	"github.com/realty-gateway/gateway/upstream"
)

// Conditional writes (RFC 9110 §13). PUT and DELETE evaluate If-Match,
// If-Unmodified-Since (only without If-Match) and If-None-Match. The
// gateway checks them once against the listing it resolved, so that a
// false one is 412 before the body is read (§13.2.1), and the store checks
// them again against the row it locks for the write, so that of two writes
// that expect the same version only one happens.

// errPreconditionRequired answers a write without If-Match or
// If-Unmodified-Since where writes must be conditional (RFC 6585 §3).
var errPreconditionRequired = &problem{status: fiber.StatusPreconditionRequired,
	detail: "This write must be conditional: send If-Match with the listing's ETag (or If-Unmodified-Since)."}

// preconditionOf reads a write's preconditions: every line of each header,
// as one list. Tags of a compressed variant stand for the version they
// encode. A list that is not a list of entity tags is a 400; a date that
// does not parse is ignored, as RFC 9110 §13.1.4 asks.
func (s *Server) preconditionOf(c *fiber.Ctx) (upstream.Precondition, error) {
	var p upstream.Precondition
	h := &c.Request().Header
	var err error
	if p.IfMatch, p.AnyMatch, err = tagList(h.PeekAll(fiber.HeaderIfMatch)); err != nil {
		return p, badRequest("If-Match must be * or a list of entity tags.")
	}
	if p.IfNoneMatch, p.AnyNoneMatch, err = tagList(h.PeekAll(fiber.HeaderIfNoneMatch)); err != nil {
		return p, badRequest("If-None-Match must be * or a list of entity tags.")
	}
	if dates := h.PeekAll(fiber.HeaderIfUnmodifiedSince); len(dates) == 1 {
		if t, err := http.ParseTime(string(dates[0])); err == nil {
			p.IfUnmodifiedSince = max(t.Unix(), 1) // 0 means absent; 1970 itself holds for no listing
		}
	}
	guarded := p.AnyMatch || len(p.IfMatch) > 0 || p.IfUnmodifiedSince != 0
	if s.cfg.RequirePrecondition && !guarded {
		return p, errPreconditionRequired
	}
	return p, nil
}

// checkPrecondition evaluates p against the listing a write resolved: a
// precondition already false is 412 before the body is read. The store
// evaluates it again in the write itself.
func checkPrecondition(p upstream.Precondition, current upstream.Listing) error {
	if !p.Required() {
		return nil
	}
	e, err := upstream.Encode(current)
	if err != nil {
		return err
	}
	if !p.Holds(e.ETag, current.UpdatedDate) {
		return upstream.ErrPreconditionFailed
	}
	return nil
}

// tagList parses the lines of an If-Match or If-None-Match field: "*", or
// a comma-separated list of entity tags (RFC 9110 §8.8.3), empty elements
// allowed. The tags are copied, their codings' suffixes taken off.
func tagList(lines [][]byte) (tags [][]byte, any bool, err error) {
	for _, line := range lines {
		rest := line
		for {
			rest = bytes.TrimLeft(rest, " \t")
			if len(rest) == 0 {
				break
			}
			switch {
			case rest[0] == ',':
				rest = rest[1:]
				continue
			case rest[0] == '*':
				any, rest = true, rest[1:]
			default:
				var tag []byte
				if tag, rest, err = entityTag(rest); err != nil {
					return nil, false, err
				}
				tags = append(tags, coding.IdentityTag(slices.Clone(tag)))
			}
			rest = bytes.TrimLeft(rest, " \t")
			if len(rest) > 0 && rest[0] != ',' {
				return nil, false, errMalformedTag
			}
		}
	}
	if any && len(tags) > 0 {
		return nil, false, errMalformedTag // "*" stands alone
	}
	return tags, any, nil
}

var errMalformedTag = badRequest("malformed entity tag")

// entityTag splits the entity tag at the start of b: [W/] DQUOTE *etagc
// DQUOTE, where etagc is a visible character but DQUOTE, or obs-text.
func entityTag(b []byte) (tag, rest []byte, err error) {
	start := 0
	if bytes.HasPrefix(b, []byte("W/")) {
		start = 2
	}
	if len(b) <= start || b[start] != '"' {
		return nil, nil, errMalformedTag
	}
	for i := start + 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return b[:i+1], b[i+1:], nil
		case c < 0x21 || c == 0x7f:
			return nil, nil, errMalformedTag
		}
	}
	return nil, nil, errMalformedTag
}
