package gateway

import (
	_ "embed"
	"fmt"

	"github.com/gofiber/fiber/v2"

	"github.com/realty-gateway/gateway/coding"
	"github.com/realty-gateway/gateway/upstream"
)

// openAPIYAML is the checked-in OpenAPI 3.1 description of App, served as
// it stands at GET /openapi.yaml.
//
//go:embed openapi.yaml
var openAPIYAML []byte

// documentVariants are a public document in each coding, with its entity
// tag: made once, as the listing bodies are, and tagged the way they are.
type documentVariants [coding.Count]struct{ body, etag []byte }

// smaller returns cod where its body is smaller than the identity body,
// else Identity where the request's Accept-Encoding lines, accepts,
// accept it: a coding that does not shrink the body is not sent.
func smaller(cod coding.Coding, compressed, identity int, accepts [][]byte) coding.Coding {
	if cod == coding.Identity || compressed < identity || !coding.Acceptable(accepts, coding.Identity) {
		return cod
	}
	return coding.Identity
}

func newDocumentVariants(z *coding.Compressor, doc []byte) (documentVariants, error) {
	var v documentVariants
	identity := upstream.ETag(doc)
	for c := range coding.Count {
		body, err := z.Compress(c, doc)
		if err != nil {
			return v, err
		}
		v[c].body, v[c].etag = body, coding.AppendTag(nil, identity, c)
	}
	return v, nil
}

// publicDocuments are what anyone may read: the API description;
// compressor makes the JWKS's variants when the key set changes.
type publicDocuments struct {
	compressor *coding.Compressor
	api        documentVariants
}

func newPublicDocuments() (publicDocuments, error) {
	z, err := coding.NewCompressor()
	if err != nil {
		return publicDocuments{}, err
	}
	api, err := newOpenAPIVariants(z)
	if err != nil {
		return publicDocuments{}, err
	}
	return publicDocuments{compressor: z, api: api}, nil
}

func newOpenAPIVariants(z *coding.Compressor) (documentVariants, error) {
	v, err := newDocumentVariants(z, openAPIYAML)
	if err != nil {
		return v, fmt.Errorf("openapi.yaml: %w", err)
	}
	return v, nil
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
	return serveDocument(c, &s.docs.api, openAPIMediaType, openAPICacheControl)
}

// serveDocument answers with the variant of the document in the coding the
// request accepts: 304 where If-None-Match names its tag, 406 where it
// accepts none.
func serveDocument(c *fiber.Ctx, doc *documentVariants, mediaType, cacheControl string) error {
	h := &c.Response().Header
	req := &c.Request().Header
	h.Set(fiber.HeaderVary, fiber.HeaderAcceptEncoding)
	var accepts [4][]byte
	lines := requestFields(req, fiber.HeaderAcceptEncoding, accepts[:0])
	cod, ok := coding.Negotiate(lines)
	if !ok {
		return errNotAcceptable
	}
	cod = smaller(cod, len(doc[cod].body), len(doc[coding.Identity].body), lines)
	v := doc[cod]
	h.SetBytesV(fiber.HeaderETag, v.etag)
	h.Set(fiber.HeaderCacheControl, cacheControl)
	if noneMatch(req.PeekAll(fiber.HeaderIfNoneMatch), v.etag) {
		return c.SendStatus(fiber.StatusNotModified)
	}
	if cod != coding.Identity {
		h.Set(fiber.HeaderContentEncoding, cod.Name())
	}
	h.SetContentType(mediaType)
	return c.Send(v.body)
}
