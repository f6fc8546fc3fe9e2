package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"go.opentelemetry.io/otel/trace"

	"github.com/realty-gateway/gateway/internal/logctx"
)

// headerRequestID names a request in logs and answers; canonicalRequestID
// is its name as fasthttp writes a request's (headers.go).
const (
	headerRequestID    = "X-Request-ID"
	canonicalRequestID = "X-Request-Id"
)

// maxRequestIDLen bounds an accepted incoming request id.
const maxRequestIDLen = 128

// errPanicked is a handler's panic turned into an answer: a plain 500.
// frame has logged it with its stack.
var errPanicked = errors.New("handler panicked")

// frame runs first on every request. It names the request (a well-formed
// incoming X-Request-ID, or a fresh one), echoes the name on the answer,
// ends the request's context (see requestContext), and turns a panic below
// it into a 500 problem, one error log line with the stack, and a count in
// Panics.
func (s *Server) frame(c *fiber.Ctx) (err error) {
	if id := requestField(&c.Request().Header, canonicalRequestID); validRequestID(id) {
		c.Response().Header.SetCanonical([]byte(canonicalRequestID), id)
	} else {
		var buf [48]byte
		c.Response().Header.SetCanonical([]byte(canonicalRequestID), s.newRequestID(buf[:0]))
	}
	var span trace.Span
	if s.tracer != nil && !inPreflight(c) {
		span = s.startSpan(c)
	}
	defer func() {
		if r := recover(); r != nil {
			s.panics.Add(1)
			s.log.Error("handler panicked", "requestId", requestID(c), "method", c.Method(),
				"route", c.Route().Path, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = errPanicked
		}
		s.finish(c, span, err)
	}()
	return methodError(c, c.Next())
}

// finish ends the request's context and span, and counts and logs its
// answer: code is the error's when the handler returned one (the error
// handler answers after frame).
func (s *Server) finish(c *fiber.Ctx, span trace.Span, err error) {
	if cancel, ok := c.Locals(cancelKey{}).(context.CancelFunc); ok {
		cancel()
	}
	if err == errContinue {
		return // a preflight that let the request go on: it is served next
	}
	if s.obs == nil && s.cfg.AccessLog == "off" && span == nil {
		return
	}
	code := c.Response().StatusCode()
	if err != nil {
		code, _ = statusOf(err)
	}
	if span != nil {
		s.endSpan(c, span, code)
	}
	took := time.Since(requestTime(c))
	if s.obs != nil {
		s.obs.Request(routeOf(c), methodOf(c), code, took)
	}
	// An error is answered after frame returns: the error handler writes
	// its access line, with the body it sends.
	if err == nil && s.logsAccess(code) {
		s.accessLog(c, code, took)
	}
}

// logsAccess says whether an answer with code gets an access line.
func (s *Server) logsAccess(code int) bool {
	return s.cfg.AccessLog == "all" || s.cfg.AccessLog == "errors" && code >= 400
}

// accessLog writes the request's one access-log line. It names the route
// template, never the raw path, and no header: nothing a client sends as a
// credential reaches the log.
func (s *Server) accessLog(c *fiber.Ctx, code int, took time.Duration) {
	// Checked first: at level warn the line is dropped, and building it
	// costs four allocations.
	if !s.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	attrs := []slog.Attr{
		slog.String("requestId", requestID(c)), slog.String("method", methodOf(c)), slog.String("route", routeOf(c)),
		slog.Int("status", code), slog.Float64("durationMs", float64(took.Microseconds())/1000),
		slog.Int("bytes", len(c.Response().Body())),
	}
	if x := c.Response().Header.Peek("X-Cache"); len(x) > 0 {
		attrs = append(attrs, slog.String("cache", string(x)))
	}
	if s.tracer != nil {
		if a, ok := traceAttr(c); ok {
			attrs = append(attrs, a)
		}
	}
	s.log.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs...)
}

// routeOf is the request's route template, bounded for metric labels: a
// request that matched no route is "other".
func routeOf(c *fiber.Ctx) string {
	switch p := c.Route().Path; p {
	case "/auth/login", "/realty", "/realty/:ref", "/openapi.yaml", jwksPath:
		return p
	default:
		return "other"
	}
}

// methodOf is the request's method, bounded for metric labels: any method
// the gateway does not serve is "OTHER".
func methodOf(c *fiber.Ctx) string {
	switch c.Method() {
	case fiber.MethodGet:
		return fiber.MethodGet
	case fiber.MethodPost:
		return fiber.MethodPost
	case fiber.MethodPut:
		return fiber.MethodPut
	case fiber.MethodDelete:
		return fiber.MethodDelete
	case fiber.MethodHead:
		return fiber.MethodHead
	default:
		return "OTHER"
	}
}

type (
	deadlineKey struct{}
	cancelKey   struct{}
)

// requestContext is the request's context, which ends with RequestTimeout.
// It is made on first use, so that a request answered from memory pays for
// no timer; frame ends it.
func (s *Server) requestContext(c *fiber.Ctx) context.Context {
	if ctx, ok := c.Locals(deadlineKey{}).(context.Context); ok {
		return ctx
	}
	base := context.Background()
	if s.tracer != nil {
		base = spanContext(c)
	}
	ctx, cancel := context.WithTimeout(logctx.WithRequestID(base, requestID(c)), s.cfg.RequestTimeout)
	c.Locals(deadlineKey{}, ctx)
	c.Locals(cancelKey{}, cancel)
	return ctx
}

// readContext is a read's request context, made on first use: a hit from
// the process's memory uses none, and requestContext's timer and values
// cost allocations. It is one pointer, pooled (Server.readContexts), so
// that passing it allocates nothing; the cache keeps no reference to it
// past its read (a flight keeps only its values).
type readContext struct {
	s *Server
	c *fiber.Ctx
}

func (s *Server) readContext(c *fiber.Ctx) *readContext {
	rc, _ := s.readContexts.Get().(*readContext)
	if rc == nil {
		rc = new(readContext)
	}
	rc.s, rc.c = s, c
	return rc
}

// putReadContext returns rc to the pool, holding no request.
func (s *Server) putReadContext(rc *readContext) {
	rc.c = nil
	s.readContexts.Put(rc)
}

func (rc *readContext) context() context.Context    { return rc.s.requestContext(rc.c) }
func (rc *readContext) Deadline() (time.Time, bool) { return rc.context().Deadline() }
func (rc *readContext) Done() <-chan struct{}       { return rc.context().Done() }
func (rc *readContext) Err() error                  { return rc.context().Err() }

// Value answers a span's lookup from the request's span, without making
// the request's context: a traced hit asks for nothing else.
func (rc *readContext) Value(key any) any {
	if v := spanContext(rc.c).Value(key); v != nil {
		return v
	}
	return rc.context().Value(key)
}

// Panics is how many handler panics frame has turned into 500s.
func (s *Server) Panics() uint64 { return s.panics.Load() }

// requestID is the request's name, as frame set it on the answer.
func requestID(c *fiber.Ctx) string {
	return string(c.Response().Header.Peek(headerRequestID))
}

// validRequestID accepts 1 to maxRequestIDLen letters, digits and "-_.:".
func validRequestID(id []byte) bool {
	if len(id) == 0 || len(id) > maxRequestIDLen {
		return false
	}
	for _, b := range id {
		switch {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9', b == '-', b == '_', b == '.', b == ':':
		default:
			return false
		}
	}
	return true
}

// newRequestID appends this process's random prefix and the next number.
func (s *Server) newRequestID(buf []byte) []byte {
	buf = append(buf, s.requestIDPrefix...)
	return strconv.AppendUint(buf, s.requestCount.Add(1), 36)
}

// newRequestIDPrefix tells this process's request ids from other
// processes'.
func newRequestIDPrefix() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b) + "-", nil
}

// requestTime is when the request arrived, read once by the server.
func requestTime(c *fiber.Ctx) time.Time {
	if t := c.Context().Time(); !t.IsZero() {
		return t
	}
	return time.Now() // a handler driven without a server, as in benchmarks
}
