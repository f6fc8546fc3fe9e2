package gateway

import (
	"errors"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// Expect: 100-continue (RFC 9110 §10.1.1). A client that sends it waits
// for "100 Continue" before it sends the body, so that a request refused
// on its head costs no upload. fasthttp answers 100 Continue as soon as
// it has read the head, before any handler runs; here its ExpectHandler
// first runs the request through a preflight copy of the routes, which
// stops where the handler would read the body (or, for DELETE, write):
// a request refused before that point (400, 401, 404, 405, 412, 413,
// 415, 428) is answered at once, as the error handler answers it, and the
// connection is closed, since the client may have started sending anyway.
// A request that reaches its body gets 100 Continue, and its headers are
// checked again when it is served: the preflight leaves no trace but its
// token memory and cache reads. GET and HEAD, which carry no body, are
// never held back.

type (
	// preflightKey marks a request that the preflight routes run.
	preflightKey struct{}
	// continueKey marks a preflight that reached the request's body.
	continueKey struct{}
)

// errContinue is what a preflight request returns where it would read its
// body: the request may send it.
var errContinue = errors.New("preflight reached the body")

// expectContinue is the server's ExpectHandler: 100 (StatusContinue) for a
// request that may send its body, else the status of the answer that the
// preflight routes made.
func (s *Server) expectContinue(preflight fasthttp.RequestHandler) func(*fasthttp.RequestCtx) int {
	return func(ctx *fasthttp.RequestCtx) int {
		if ctx.IsGet() || ctx.IsHead() {
			return fasthttp.StatusContinue
		}
		preflight(ctx)
		if ctx.UserValue(continueKey{}) != nil {
			ctx.ResetUserValues() // the request context, span and token of the preflight
			ctx.Response.Reset()
			return fasthttp.StatusContinue
		}
		ctx.ResetUserValues()
		return ctx.Response.StatusCode()
	}
}

func markPreflight(c *fiber.Ctx) error {
	c.Locals(preflightKey{}, true)
	return c.Next()
}

func inPreflight(c *fiber.Ctx) bool { return c.Locals(preflightKey{}) != nil }

// preflightLength refuses a body announced larger than the limit: the
// server refuses it on its Content-Length as well, but only after 100
// Continue.
func (s *Server) preflightLength(c *fiber.Ctx) error {
	if c.Request().Header.ContentLength() > s.cfg.BodyLimit {
		return fiber.ErrRequestEntityTooLarge
	}
	return c.Next()
}

// preflightErrors is the preflight routes' error handler: a request that
// reached its body is marked, and answers nothing; any other error is
// answered as the error handler answers it.
func (s *Server) preflightErrors(c *fiber.Ctx, err error) error {
	if errors.Is(err, errContinue) {
		c.Context().SetUserValue(continueKey{}, true)
		return nil
	}
	return s.errorHandler(c, err)
}
