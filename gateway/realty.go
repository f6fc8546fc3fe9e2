package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/realty-gateway/gateway/cache"
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

func (s *Server) view(c *fiber.Ctx) error {
	key, ok := ParseRef(c.Params("ref"))
	if !ok {
		return errBadPath
	}
	now := requestTime(c)
	e, ok := s.cached(c, key, now)
	if !ok {
		var err error
		if e, err = s.listings.Get(s.requestContext(c), key); err != nil {
			return err
		}
	}
	if !e.Active && e.FirmID != principalOf(c).FirmID {
		return upstream.ErrNotFound
	}
	s.cacheHeaders(c, e, now)
	// Header names here are in fasthttp's normalized form already
	// ("Etag", "X-Request-Id"): SetCanonical skips normalizing them, which
	// costs more than the rest of a hit.
	h := &c.Response().Header
	h.SetCanonical([]byte("X-Cache"), []byte(e.State.String()))
	var buf [64]byte
	h.SetCanonical([]byte("Cache-Status"), appendCacheStatus(buf[:0], e, now))
	if etagMatches(c.Request().Header.Peek(fiber.HeaderIfNoneMatch), e.ETag) {
		return c.SendStatus(fiber.StatusNotModified)
	}
	h.SetContentType(fiber.MIMEApplicationJSON)
	return c.Send(e.Body)
}

// cacheHeaders says who may keep a listing response. By default only the
// browser, revalidating with the ETag (RFC 9111: a shared cache must not
// reuse a response to a request with Authorization unless it is marked
// public). In CDN mode active listings are public and tagged for purging;
// passive listings never are.
//
// A stale copy, served while the store fails, is never sent as fresh: it
// carries its Age, and shared caches get no freshness lifetime, only
// stale-if-error, so a CDN keeps asking and stores the fresh version as
// soon as the store answers.
func (s *Server) cacheHeaders(c *fiber.Ctx, e cache.Entry, now time.Time) {
	h := &c.Response().Header
	h.SetCanonical([]byte("Etag"), e.ETag)
	stale := e.State == cache.Stale
	if stale {
		storedAt := e.FreshUntil - s.cacheTTL.Milliseconds()
		var buf [20]byte
		h.SetCanonical([]byte("Age"), strconv.AppendInt(buf[:0], max(0, (now.UnixMilli()-storedAt)/1000), 10))
	}
	if s.cfg.CDN.PublicActive && e.Active {
		if stale {
			c.Set(fiber.HeaderCacheControl, s.staleCacheControl)
		} else {
			c.Set(fiber.HeaderCacheControl, s.publicCacheControl)
		}
		keys := surrogateKeys(e.ID, e.FirmID)
		c.Set("Surrogate-Key", strings.Join(keys, " "))
		c.Set("Cache-Tag", strings.Join(keys, ","))
		return
	}
	h.SetCanonical([]byte(fiber.HeaderCacheControl), s.privateCacheControl)
	h.SetCanonical([]byte(fiber.HeaderVary), []byte(fiber.HeaderAuthorization))
}

// cacheControls returns the Cache-Control values of listing responses,
// built once: for private responses, for public ones in CDN mode, and for
// public ones served stale.
func cacheControls(cfg Config) (private, public, stale string) {
	private = "private, no-cache"
	if cfg.MaxAge > 0 {
		private = "private, max-age=" + strconv.Itoa(seconds(cfg.MaxAge, 0))
	}
	public = "public, max-age=" + strconv.Itoa(seconds(cfg.MaxAge, 0)) +
		", s-maxage=" + strconv.Itoa(seconds(cfg.CDN.SMaxAge, 0)) +
		", stale-while-revalidate=" + strconv.Itoa(seconds(cfg.CDN.StaleWhileRevalidate, 0)) +
		", stale-if-error=" + strconv.Itoa(seconds(cfg.CDN.StaleIfError, 0))
	stale = "public, max-age=0, s-maxage=0, stale-if-error=" + strconv.Itoa(seconds(cfg.CDN.StaleIfError, 0))
	return private, public, stale
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
	default:
		return append(b, "fwd=miss"...)
	}
}

// etagMatches applies If-None-Match's weak comparison (RFC 9110 §13.1.2).
func etagMatches(header, etag []byte) bool {
	if len(header) == 0 {
		return false
	}
	for _, tag := range bytes.Split(header, []byte(",")) {
		tag = bytes.TrimSpace(tag)
		if string(tag) == "*" || bytes.Equal(bytes.TrimPrefix(tag, []byte("W/")), etag) {
			return true
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

func (s *Server) create(c *fiber.Ctx) error {
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
	return s.sendWritten(c.Status(fiber.StatusCreated), w.Entry)
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

func (s *Server) replace(c *fiber.Ctx) error {
	current, err := s.owned(c)
	if err != nil {
		return err
	}
	next, err := decodeBody(c)
	if err != nil {
		return err
	}
	ctx := s.requestContext(c)
	w, err := s.listings.Replace(ctx, current, next)
	if err != nil {
		return err
	}
	// A listing that stops being public must not be served even stale.
	s.purge(ctx, current.IsActive && !w.Listing.IsActive, w)
	return s.sendWritten(c, w.Entry)
}

func (s *Server) remove(c *fiber.Ctx) error {
	current, err := s.owned(c)
	if err != nil {
		return err
	}
	ctx := s.requestContext(c)
	w, err := s.listings.Delete(ctx, current)
	if err != nil {
		return err
	}
	s.purge(ctx, true, w)
	return c.SendStatus(fiber.StatusNoContent)
}

// sendWritten answers a write with the stored listing.
func (s *Server) sendWritten(c *fiber.Ctx, e cache.Entry) error {
	c.Response().Header.SetBytesV(fiber.HeaderETag, e.ETag)
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(e.Body)
}
