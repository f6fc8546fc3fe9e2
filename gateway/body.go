package gateway

import (
	"bytes"
	"strings"

	"github.com/gofiber/fiber/v2"
)

var (
	errNotJSON = &problem{status: fiber.StatusUnsupportedMediaType, detail: "Content-Type must be application/json."}
	// errContentCoding refuses compressed bodies: decoding one unbounded
	// is how a 517-byte request once took 1.1 GB.
	errContentCoding = &problem{
		status: fiber.StatusUnsupportedMediaType,
		detail: "Content-Encoding is not supported: send the body uncompressed (identity).",
		header: [2]string{fiber.HeaderAcceptEncoding, "identity"},
	}
)

// jsonBody is the one place a handler reads a request body. It takes the
// bytes as they came off the wire, never Fiber's Ctx.Body, which inflates
// gzip, deflate and br (chains too) without any bound; a body with any
// content coding but identity is refused with 415 (RFC 9110 §15.5.16).
func jsonBody(c *fiber.Ctx) ([]byte, error) {
	if !isJSON(c.Get(fiber.HeaderContentType)) {
		return nil, errNotJSON
	}
	// Every Content-Encoding line counts: c.Get sees only the first.
	for _, line := range c.Request().Header.PeekAll(fiber.HeaderContentEncoding) {
		for _, coding := range bytes.Split(line, []byte(",")) {
			coding = bytes.TrimSpace(coding)
			if len(coding) > 0 && !bytes.EqualFold(coding, []byte("identity")) {
				return nil, errContentCoding
			}
		}
	}
	if inPreflight(c) {
		return nil, errContinue // Expect: 100-continue, and nothing refused the head
	}
	return c.Request().Body(), nil
}

func isJSON(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.TrimSpace(mt)
	return strings.EqualFold(mt, "application/json") || (strings.HasPrefix(strings.ToLower(mt), "application/") && strings.HasSuffix(strings.ToLower(mt), "+json"))
}
