package gateway

import (
	"crypto/sha256"
	_ "embed"
	"encoding/base64"

	"github.com/gofiber/fiber/v2"
)

// openAPIYAML is the checked-in OpenAPI 3.1 description of App, served as
// it stands at GET /openapi.yaml.
//
//go:embed openapi.yaml
var openAPIYAML []byte

// openAPIETag is the strong entity tag of openAPIYAML, made the way the
// cache tags listing bodies: a quoted base64url SHA-256 prefix. New keeps
// it in the Server.
func openAPIETag() []byte {
	sum := sha256.Sum256(openAPIYAML)
	return []byte(`"` + base64.RawURLEncoding.EncodeToString(sum[:16]) + `"`)
}

// openAPICacheControl lets any cache keep the document for five minutes:
// it is public and changes only with a new build, and after that the
// ETag makes a revalidation cheap.
const openAPICacheControl = "public, max-age=300"

// openAPIMediaType is YAML's media type (RFC 9512).
const openAPIMediaType = "application/yaml"

// openAPI serves the API description, to anyone: no token. HEAD is
// answered like GET, without the body.
func (s *Server) openAPI(c *fiber.Ctx) error {
	h := &c.Response().Header
	h.SetBytesV(fiber.HeaderETag, s.openAPIETag)
	h.Set(fiber.HeaderCacheControl, openAPICacheControl)
	if etagMatches(c.Request().Header.Peek(fiber.HeaderIfNoneMatch), s.openAPIETag) {
		return c.SendStatus(fiber.StatusNotModified)
	}
	h.SetContentType(openAPIMediaType)
	return c.Send(openAPIYAML)
}
