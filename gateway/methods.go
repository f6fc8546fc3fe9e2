package gateway

import (
	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// Fiber answers a method outside its list (fiber.DefaultMethods) with a
// bare 400 "Invalid http method" before any handler runs: no problem
// body, no X-Request-ID. RFC 9110 §9.1 asks 501 of an origin for a method
// it does not recognise. entry routes such a request as TRACE, which no
// route serves, so that it passes frame and Fiber finds the path's
// methods for Allow; the error handler then answers 501 (errUnknownMethod).

// unknownMethod marks a request whose method is none of Fiber's.
type unknownMethod struct{}

// entry is the stage in front of the Fiber app: it routes unknown
// methods as above.
func (s *Server) entry(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if !knownMethod(ctx.Method()) {
			ctx.SetUserValue(unknownMethod{}, true)
			ctx.Request.Header.SetMethod(fiber.MethodTrace)
		}
		next(ctx)
	}
}

// knownMethod reports whether Fiber routes method: one of its
// DefaultMethods, the methods of RFC 9110 and PATCH.
func knownMethod(method []byte) bool {
	switch string(method) {
	case fiber.MethodGet, fiber.MethodHead, fiber.MethodPost, fiber.MethodPut, fiber.MethodDelete,
		fiber.MethodConnect, fiber.MethodOptions, fiber.MethodTrace, fiber.MethodPatch:
		return true
	}
	return false
}

// errUnknownMethod answers a request whose method the gateway does not
// recognise, with the path's methods in Allow where it has any.
var errUnknownMethod = &problem{status: fiber.StatusNotImplemented,
	detail: "The request method is not one this server recognises."}

// methodError is the error a request answers with: where its method is
// unknown, routed as TRACE, the 405 (a path with routes) or 404 (none)
// it met is a 501.
func methodError(c *fiber.Ctx, err error) error {
	if err == nil || c.Context().UserValue(unknownMethod{}) == nil {
		return err
	}
	if code, _ := statusOf(err); code != fiber.StatusMethodNotAllowed && code != fiber.StatusNotFound {
		return err
	}
	return errUnknownMethod
}
