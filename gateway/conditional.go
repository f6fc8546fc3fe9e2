package gateway

import (
	"bytes"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/realty-gateway/gateway/cache"
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

// preconditionOf reads the preconditions of a PUT or DELETE (see
// conditions.precondition); where writes must be conditional, one without
// If-Match or If-Unmodified-Since is 428.
func (s *Server) preconditionOf(c *fiber.Ctx) (upstream.Precondition, error) {
	p, err := readConditions(&c.Request().Header).precondition()
	if err != nil {
		return p, err
	}
	guarded := p.AnyMatch || len(p.IfMatch) > 0 || p.IfUnmodifiedSince != 0
	if s.cfg.RequirePrecondition && !guarded {
		return p, errPreconditionRequired
	}
	return p, nil
}

// conditions are a request's conditional fields, every line of each,
// read in one pass over its headers.
type conditions struct {
	ifMatch, ifNoneMatch, ifModifiedSince, ifUnmodifiedSince [][]byte
}

func readConditions(h *fasthttp.RequestHeader) conditions {
	var c conditions
	for k, v := range h.All() {
		if len(k) < 3 || k[0]|0x20 != 'i' || k[1]|0x20 != 'f' || k[2] != '-' {
			continue
		}
		switch {
		case bytes.EqualFold(k, []byte(fiber.HeaderIfMatch)):
			c.ifMatch = append(c.ifMatch, v)
		case bytes.EqualFold(k, []byte(fiber.HeaderIfNoneMatch)):
			c.ifNoneMatch = append(c.ifNoneMatch, v)
		case bytes.EqualFold(k, []byte(fiber.HeaderIfModifiedSince)):
			c.ifModifiedSince = append(c.ifModifiedSince, v)
		case bytes.EqualFold(k, []byte(fiber.HeaderIfUnmodifiedSince)):
			c.ifUnmodifiedSince = append(c.ifUnmodifiedSince, v)
		}
	}
	return c
}

// precondition is what the fields ask, each field's lines as one list.
// Tags of a compressed variant stand for the version they encode. A list
// that is not a list of entity tags is a 400; a date that does not parse
// is ignored, as RFC 9110 §13.1.4 asks.
func (c conditions) precondition() (upstream.Precondition, error) {
	var p upstream.Precondition
	var err error
	if p.IfMatch, p.AnyMatch, err = tagList(c.ifMatch); err != nil {
		return p, badRequest("If-Match must be * or a list of entity tags.")
	}
	if p.IfNoneMatch, p.AnyNoneMatch, err = tagList(c.ifNoneMatch); err != nil {
		return p, badRequest("If-None-Match must be * or a list of entity tags.")
	}
	if t, ok := httpDate(c.ifUnmodifiedSince); ok {
		p.IfUnmodifiedSince = max(t, 1) // 0 means absent; 1970 itself holds for no listing
	}
	return p, nil
}

// httpDate is the one date of a date field, in unix seconds; false where
// the field is absent, repeated or not an HTTP date.
func httpDate(lines [][]byte) (int64, bool) {
	if len(lines) != 1 {
		return 0, false
	}
	t, err := http.ParseTime(string(lines[0]))
	return t.Unix(), err == nil
}

// createPrecondition evaluates a POST's preconditions. The listing it
// creates has no current representation yet, so If-Match, whatever it
// names, is false (RFC 9110 §13.1.1) and If-None-Match, even "*", holds;
// If-Unmodified-Since is ignored, as there is no modification date
// (§13.1.4). A false one is 412 before the body is read.
func createPrecondition(c *fiber.Ctx) error {
	p, err := readConditions(&c.Request().Header).precondition()
	if err != nil {
		return err
	}
	if p.AnyMatch || len(p.IfMatch) > 0 {
		return upstream.ErrPreconditionFailed
	}
	return nil
}

// conditionalRead reports whether a read carries a conditional field
// (If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since, or
// another If-): the hot hit's only cost of preconditions. A request read
// off the wire is one scan of its raw header block for a line that starts
// with "If-", in any case; one made in process (no raw block) is asked
// field by field. A false positive only costs the full evaluation.
func conditionalRead(h *fasthttp.RequestHeader) bool {
	raw := h.RawHeaders()
	if len(raw) == 0 {
		for _, name := range conditionalFields {
			if len(h.PeekCanonical(name)) > 0 {
				return true
			}
		}
		return false
	}
	for {
		if len(raw) >= 3 && raw[0]|0x20 == 'i' && raw[1]|0x20 == 'f' && raw[2] == '-' {
			return true
		}
		i := bytes.IndexByte(raw, '\n')
		if i < 0 {
			return false
		}
		raw = raw[i+1:]
	}
}

// conditionalFields are the fields a read evaluates, in fasthttp's
// normalized form.
var conditionalFields = [][]byte{[]byte(fiber.HeaderIfMatch), []byte(fiber.HeaderIfNoneMatch),
	[]byte(fiber.HeaderIfModifiedSince), []byte(fiber.HeaderIfUnmodifiedSince)}

// readPrecondition evaluates a GET's or HEAD's preconditions against the
// representation it selected (tag is the coding's), in RFC 9110 §13.2.2's
// order: If-Match, else If-Unmodified-Since, as for writes (the same
// evaluation, the same Last-Modified), a false one 412; then If-None-Match
// (weak comparison with the coding's tag), else If-Modified-Since, a
// false one 304 (notModified).
func readPrecondition(h *fasthttp.RequestHeader, e cache.Entry, tag []byte) (notModified bool, err error) {
	fields := readConditions(h)
	p, err := fields.precondition()
	if err != nil {
		return false, err
	}
	lastModified, dated := lastModifiedOf(e)
	guard := upstream.Precondition{IfMatch: p.IfMatch, AnyMatch: p.AnyMatch}
	if dated {
		guard.IfUnmodifiedSince = p.IfUnmodifiedSince
	}
	if !guard.Holds(e.ETag, e.LastModified) {
		return false, upstream.ErrPreconditionFailed
	}
	if len(fields.ifNoneMatch) > 0 {
		return noneMatch(fields.ifNoneMatch, tag), nil
	}
	if since, ok := httpDate(fields.ifModifiedSince); ok && dated {
		return lastModified <= since, nil
	}
	return false, nil
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
	if !p.Holds(e.ETag, current.Modified) {
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
				if any {
					return nil, false, errMalformedTag // "*" stands alone
				}
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

// lastModifiedOf is the second of e's Last-Modified: the time the store
// recorded its version; false where it has none (a record of an earlier
// release). It is the date sent and the date compared.
//
// Dates have whole seconds and revisions do not, so the store gives each
// revision of a listing a later second than the one before
// (sqlstore.nextModified): a client that holds an older revision holds an
// older date. A revision's second may run ahead of the clock (the third
// write within a second); its answers carry no Last-Modified until the
// clock reaches it (RFC 9110 §8.8.2.1 forbids a date after the answer's
// own, and a replaced date would name another revision's second), and
// the ETag validates it meanwhile.
func lastModifiedOf(e cache.Entry) (int64, bool) {
	return floorDiv(e.LastModified, 1000), e.LastModified > 0
}

// appendHTTPDate appends unix second sec as an IMF-fixdate (RFC 9110
// §5.6.7), "Sun, 06 Nov 1994 08:49:37 GMT", without time.Format's work.
func appendHTTPDate(b []byte, sec int64) []byte {
	t := time.Unix(sec, 0).UTC()
	year, month, day := t.Date()
	hour, minute, second := t.Clock()
	b = append(b, weekdays[t.Weekday()]...)
	b = append(b, ", "...)
	b = append2(b, day)
	b = append(b, ' ')
	b = append(b, months[month-1]...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(year), 10)
	b = append(b, ' ')
	b = append2(append(append2(append(append2(b, hour), ':'), minute), ':'), second)
	return append(b, " GMT"...)
}

var (
	weekdays = [...]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}
	months   = [...]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
)

// append2 appends n, 0 to 99, as two digits.
func append2(b []byte, n int) []byte { return append(b, byte('0'+n/10), byte('0'+n%10)) }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
