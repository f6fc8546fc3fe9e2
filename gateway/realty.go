package gateway

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/upstream"
)

// parseRef tells the two path forms apart: plain decimal digits are an id,
// "<digits>-<digits>" is a listing number. Numbers start at 1 and are
// written without sign or leading zeros.
func parseRef(ref string) (cache.Key, bool) {
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

func (s *Server) view(c *fiber.Ctx) error {
	key, ok := parseRef(c.Params("ref"))
	if !ok {
		return badRequest("The path must be /realty/{id} or /realty/{firmId}-{no}, with positive decimal numbers.")
	}
	e, err := s.listings.Get(c.UserContext(), key)
	if err != nil {
		return err
	}
	if !e.Active && e.FirmID != principalOf(c).FirmID {
		return upstream.ErrNotFound
	}
	c.Set("X-Cache", e.State.String())
	c.Set(fiber.HeaderCacheControl, "private, no-cache")
	c.Set(fiber.HeaderETag, string(e.ETag))
	c.Set(fiber.HeaderVary, fiber.HeaderAuthorization)
	if etagMatches(c.Request().Header.Peek(fiber.HeaderIfNoneMatch), e.ETag) {
		return c.SendStatus(fiber.StatusNotModified)
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(e.Body)
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
