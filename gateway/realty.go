package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/coding"
	"github.com/realty-gateway/gateway/upstream"
)

// ParseRef tells the two path forms apart: plain decimal digits are an id,
// "<digits>-<digits>" is a listing number. Numbers start at 1 and are
// written without sign or leading zeros.
func ParseRef(ref string) (cache.Key, bool) {
	firm, no, numbered := strings.Cut(ref, "-")
	if !numbered {
		id, ok := parseID(ref)
		return cache.ByID(id), ok
	}
	f, okF := parseID(firm)
	n, okN := parseID(no)
	return cache.ByNumber(f, n), okF && okN
}

func parseID(s string) (int64, bool) {
	if s == "" || s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

var errBadPath = badRequest("The path must be /realty/{id} or /realty/{firmId}-{no}, with positive decimal numbers.")

// view answers GET and HEAD /realty/{ref}: the listing by id or by
// number, 404 for none or for another firm's passive one, read through
// the cache (the request's context is made only where the read needs it);
// with its ETag, Last-Modified, caching headers and the body in the
// client's coding, or 304 and 412 as its preconditions say.
func (s *Server) view(c *fiber.Ctx) error {
	key, ok := ParseRef(c.Params("ref"))
	if !ok {
		return errBadPath
	}
	now := requestTime(c)
	req := &c.Request().Header
	var accepts [4][]byte
	acceptLines := requestFields(req, fiber.HeaderAcceptEncoding, accepts[:0])
	cod, acceptable := coding.Negotiate(acceptLines)
	rc := s.readContext(c)
	e, err := s.listings.Get(rc, key, cod, now)
	s.putReadContext(rc)
	if err != nil {
		return err
	}
	if !e.Active && e.FirmID != principalOf(c).FirmID {
		return upstream.ErrNotFound
	}
	// Header names here are in fasthttp's normalized form already
	// ("Etag", "X-Request-Id"): SetCanonical skips normalizing them, which
	// costs more than the rest of a hit.
	h := &c.Response().Header
	if !acceptable {
		h.SetCanonical([]byte(fiber.HeaderVary), s.vary(e))
		return errNotAcceptable
	}
	body := e.Body
	if cod != coding.Identity {
		if body, err = s.listings.Variant(e, cod); err != nil {
			return err
		}
		cod = smaller(cod, len(body), len(e.Body), acceptLines)
		if cod == coding.Identity {
			body = e.Body
		}
	}
	var tagBuf [64]byte
	tag := coding.AppendTag(tagBuf[:0], e.ETag, cod)
	notModified := false
	if conditionalRead(req) {
		var err error
		if notModified, err = readPrecondition(req, e, tag); err != nil {
			return err // 412 or 400, without the listing's headers
		}
	}
	s.cacheHeaders(c, e, tag, now)
	h.SetCanonical([]byte("X-Cache"), []byte(e.State.String()))
	var buf [64]byte
	h.SetCanonical([]byte("Cache-Status"), appendCacheStatus(buf[:0], e, now))
	if notModified {
		return c.SendStatus(fiber.StatusNotModified)
	}
	if cod != coding.Identity {
		h.SetCanonical([]byte(fiber.HeaderContentEncoding), []byte(cod.Name()))
	}
	h.SetContentType(fiber.MIMEApplicationJSON)
	return c.Send(body)
}

// errNotAcceptable answers a request whose Accept-Encoding refuses every
// coding the gateway sends, identity included.
var errNotAcceptable = &problem{status: fiber.StatusNotAcceptable,
	detail: "Accept-Encoding refuses every coding of this listing: identity, br, gzip and zstd."}

// cacheHeaders says who may keep a listing response, and its entity tag:
// that of the coding sent. By default only the browser, revalidating with
// the ETag (RFC 9111: a shared cache must not reuse a response to a
// request with Authorization unless it is marked public). In CDN mode
// active listings are public and tagged for purging; passive listings
// never are. The CDN's lifetime and stale rules go in a header of its own
// (RFC 9213's CDN-Cache-Control, or Fastly's Surrogate-Control), which
// browsers ignore: their Cache-Control never lets them show a stale copy.
//
// A stale copy, served while the store fails, is never sent as fresh: it
// carries its Age, and the CDN gets no freshness lifetime, only
// stale-if-error, so it keeps asking and stores the fresh version as soon
// as the store answers.
func (s *Server) cacheHeaders(c *fiber.Ctx, e cache.Entry, etag []byte, now time.Time) {
	h := &c.Response().Header
	h.SetCanonical([]byte("Etag"), etag)
	switch sec, ok := lastModifiedOf(e); {
	case !ok || !s.dates.reached(sec, now): // none, or ahead of the answer's Date
	case e.LastModifiedDate != nil: // made once per version kept in process
		h.SetCanonical([]byte(fiber.HeaderLastModified), e.LastModifiedDate)
	default:
		var date [32]byte
		h.SetCanonical([]byte(fiber.HeaderLastModified), appendHTTPDate(date[:0], sec))
	}
	h.SetCanonical([]byte(fiber.HeaderVary), s.vary(e))
	stale := e.State == cache.Stale
	if stale {
		storedAt := e.FreshUntil - s.cacheTTL.Milliseconds()
		var buf [20]byte
		h.SetCanonical([]byte("Age"), strconv.AppendInt(buf[:0], max(0, (now.UnixMilli()-storedAt)/1000), 10))
	}
	if !s.public(e) {
		h.SetCanonical([]byte(fiber.HeaderCacheControl), s.controls.private)
		return
	}
	h.SetCanonical([]byte(fiber.HeaderCacheControl), s.controls.browser)
	if stale {
		h.SetCanonical(s.controls.cdnHeader, s.controls.cdnStale)
	} else {
		h.SetCanonical(s.controls.cdnHeader, s.controls.cdn)
	}
	keys := surrogateKeys(e.ID, e.FirmID)
	c.Set("Surrogate-Key", strings.Join(keys, " "))
	c.Set("Cache-Tag", strings.Join(keys, ","))
}

// public reports whether e's responses are for shared caches.
func (s *Server) public(e cache.Entry) bool { return s.cfg.CDN.PublicActive && e.Active }

// vary names what a listing response depends on besides its path: the
// coding, and for private responses the token.
func (s *Server) vary(e cache.Entry) []byte {
	if s.public(e) {
		return s.controls.varyPublic
	}
	return s.controls.varyPrivate
}

// cacheControls are the caching header values of listing responses, built
// once by New.
type cacheControls struct {
	// private is the Cache-Control of responses for the token's holder
	// alone; browser that of public ones, which lets no cache keep them
	// past their freshness.
	private, browser []byte
	// cdnHeader carries the CDN's rules: cdn for a fresh copy, cdnStale
	// for one served while the store fails.
	cdnHeader, cdn, cdnStale []byte
	// varyPublic and varyPrivate are the Vary of each kind.
	varyPublic, varyPrivate []byte
}

func newCacheControls(cfg Config) cacheControls {
	private := "private, no-cache"
	if cfg.MaxAge > 0 {
		private = "private, max-age=" + strconv.Itoa(seconds(cfg.MaxAge, 0))
	}
	header := cfg.CDN.ControlHeader
	if header == "" {
		header = CDNCacheControl
	}
	return cacheControls{
		private: []byte(private),
		browser: []byte("public, max-age=" + strconv.Itoa(seconds(cfg.MaxAge, 0)) + ", must-revalidate"),
		// fasthttp's normalized form, as SetCanonical wants it.
		cdnHeader: []byte(textproto.CanonicalMIMEHeaderKey(header)),
		cdn: []byte("max-age=" + strconv.Itoa(seconds(cfg.CDN.SMaxAge, 0)) +
			", stale-while-revalidate=" + strconv.Itoa(seconds(cfg.CDN.StaleWhileRevalidate, 0)) +
			", stale-if-error=" + strconv.Itoa(seconds(cfg.CDN.StaleIfError, 0))),
		cdnStale:    []byte("max-age=0, stale-if-error=" + strconv.Itoa(seconds(cfg.CDN.StaleIfError, 0))),
		varyPublic:  []byte(fiber.HeaderAcceptEncoding),
		varyPrivate: []byte(fiber.HeaderAuthorization + ", " + fiber.HeaderAcceptEncoding),
	}
}

// surrogateKeys tag a listing response for CDN purges: by listing, and by
// firm for purging a whole firm at once. Writes purge the listing's key.
func surrogateKeys(id, firmID int64) []string {
	return []string{ListingKey(id), FirmKey(firmID)}
}

// ListingKey is the surrogate key of one listing's responses.
func ListingKey(id int64) string { return "realty-" + strconv.FormatInt(id, 10) }

// FirmKey is the surrogate key of every listing response of a firm.
func FirmKey(firmID int64) string { return "firm-" + strconv.FormatInt(firmID, 10) }

// PurgeKeys are the surrogate keys that a write of listing id purges.
func PurgeKeys(id int64) []string { return []string{ListingKey(id)} }

// appendCacheStatus appends the RFC 9211 Cache-Status of a listing
// response.
func appendCacheStatus(b []byte, e cache.Entry, now time.Time) []byte {
	b = append(b, "realty-gateway; "...)
	switch e.State {
	case cache.Hit:
		return strconv.AppendInt(append(b, "hit; ttl="...), (e.FreshUntil-now.UnixMilli())/1000, 10)
	case cache.Stale:
		b = strconv.AppendInt(append(b, "hit; ttl="...), min(-1, (e.FreshUntil-now.UnixMilli())/1000), 10)
		return append(b, `; detail="stale-if-error"`...)
	case cache.Miss:
		if e.Collapsed { // another gateway's load, which this one waited for
			return append(b, "fwd=miss; collapsed"...)
		}
	}
	return append(b, "fwd=miss"...)
}

// noneMatch applies If-None-Match's weak comparison (RFC 9110 §13.1.2) to
// every line of the field: true where one of its tags, or "*", matches
// etag.
func noneMatch(lines [][]byte, etag []byte) bool {
	for _, line := range lines {
		for tag := range bytes.SplitSeq(line, []byte(",")) {
			tag = bytes.TrimSpace(tag)
			if string(tag) == "*" || upstream.WeakMatch(tag, etag) {
				return true
			}
		}
	}
	return false
}

// decodeBody reads a listing body for POST and PUT: JSON that does not
// parse is a 400, a listing that is not valid a 422.
func decodeBody(c *fiber.Ctx) (upstream.Listing, error) {
	body, err := jsonBody(c)
	if err != nil {
		return upstream.Listing{}, err
	}
	if !json.Valid(body) {
		return upstream.Listing{}, badRequest("The body is not valid JSON.")
	}
	return upstream.DecodeListing(body, false)
}

// create answers POST /realty: the listing in the body, stored for the
// token's firm and user, 201 with its Location and the stored body, or 422
// with the fields that are not valid, 409 for a number the firm uses.
func (s *Server) create(c *fiber.Ctx) error {
	if err := createPrecondition(c); err != nil {
		return err
	}
	l, err := decodeBody(c)
	if err != nil {
		return err
	}
	p := principalOf(c)
	l.FirmID, l.FirmUserID = p.FirmID, p.FirmUserID
	ctx := s.requestContext(c)
	w, err := s.listings.Create(ctx, l)
	if err != nil {
		return err
	}
	s.purge(ctx, false, w)
	c.Location("/realty/" + strconv.FormatInt(w.Listing.ID, 10))
	return s.sendWritten(c.Status(fiber.StatusCreated), w.Entry, true)
}

// purge asks the CDN to drop the written listing's copies and, once it
// has, settles the write: the change feed then has nothing left to do.
func (s *Server) purge(ctx context.Context, hard bool, w cache.Written) {
	s.purger.PurgeThen(ctx, hard, func(bool) { s.listings.Settle(w) }, PurgeKeys(w.Listing.ID)...)
}

// owned resolves a write's path to the stored listing, which must be the
// token's firm's. Other firms' listings are 404, so their existence does
// not leak.
func (s *Server) owned(c *fiber.Ctx) (upstream.Listing, error) {
	key, ok := ParseRef(c.Params("ref"))
	if !ok {
		return upstream.Listing{}, errBadPath
	}
	firmID := principalOf(c).FirmID
	if key.ID == 0 && key.FirmID != firmID {
		return upstream.Listing{}, upstream.ErrNotFound
	}
	current, err := s.listings.Resolve(s.requestContext(c), key)
	if err != nil {
		return upstream.Listing{}, err
	}
	if current.FirmID != firmID {
		return upstream.Listing{}, upstream.ErrNotFound
	}
	return current, nil
}

// replace answers PUT /realty/{ref}: the firm's listing replaced by the
// body where the preconditions hold (412 before the body is read where
// they already do not), 200 with the stored listing and its
// Listing-ETag; every tier and the CDN hold the new version on return.
func (s *Server) replace(c *fiber.Ctx) error {
	current, err := s.owned(c)
	if err != nil {
		return err
	}
	cond, err := s.preconditionOf(c)
	if err != nil {
		return err
	}
	if err := checkPrecondition(cond, current); err != nil {
		return err
	}
	next, err := decodeBody(c)
	if err != nil {
		return err
	}
	ctx := s.requestContext(c)
	w, err := s.listings.Replace(ctx, current, next, cond)
	if err != nil {
		return err
	}
	// A listing that stops being public must not be served even stale.
	s.purge(ctx, current.IsActive && !w.Listing.IsActive, w)
	// RFC 9110 §9.3.4: no validator, as the stored listing is not the one
	// sent (the server sets updatedDate and the other members it owns).
	// The response is the stored listing itself (Content-Location), and
	// Listing-ETag is the ETag that its reads answer, for the next
	// conditional write.
	c.Set(fiber.HeaderContentLocation, "/realty/"+strconv.FormatInt(w.Listing.ID, 10))
	return s.sendWritten(c, w.Entry, false)
}

// remove answers DELETE /realty/{ref}: the firm's listing deleted where
// the preconditions hold, 204; both keys then answer 404 everywhere.
func (s *Server) remove(c *fiber.Ctx) error {
	current, err := s.owned(c)
	if err != nil {
		return err
	}
	cond, err := s.preconditionOf(c)
	if err != nil {
		return err
	}
	if err := checkPrecondition(cond, current); err != nil {
		return err
	}
	if inPreflight(c) {
		return errContinue // Expect: 100-continue on a DELETE that may go on
	}
	ctx := s.requestContext(c)
	w, err := s.listings.Delete(ctx, current, cond)
	if err != nil {
		return err
	}
	s.purge(ctx, true, w)
	return c.SendStatus(fiber.StatusNoContent)
}

// headerListingETag carries, in a write's answer, the entity tag that
// reads of the stored listing answer: a PUT may not send it as ETag.
const headerListingETag = "Listing-ETag"

// sendWritten answers a write with the stored listing, its tag in
// Listing-ETag, and in ETag too where validators may be sent (POST's 201
// describes the created listing; PUT's must not, RFC 9110 §9.3.4).
func (s *Server) sendWritten(c *fiber.Ctx, e cache.Entry, validators bool) error {
	h := &c.Response().Header
	if validators {
		h.SetBytesV(fiber.HeaderETag, e.ETag)
	}
	h.SetBytesV(headerListingETag, e.ETag)
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(e.Body)
}
