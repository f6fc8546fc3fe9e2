package gateway

import (
	"context"
	"log/slog"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing: with a TracerProvider (Deps.Tracer), frame starts one server
// span per request, joined to an incoming W3C traceparent, and the
// request's context carries it, so that the cache's, Redis's and the
// store's spans are its children. Without one nothing here runs.

type spanKey struct{}

// tracing returns tp's tracer of the gateway's spans and the propagator
// that reads traceparent; nil tp: neither.
func tracing(tp trace.TracerProvider) (trace.Tracer, propagation.TextMapPropagator) {
	if tp == nil {
		return nil, nil
	}
	return tp.Tracer("github.com/realty-gateway/gateway/gateway"), propagation.TraceContext{}
}

// startSpan starts the request's server span and keeps its context for
// requestContext.
func (s *Server) startSpan(c *fiber.Ctx) trace.Span {
	parent := s.propagator.Extract(context.Background(), headerCarrier{&c.Request().Header})
	ctx, span := s.tracer.Start(parent, "HTTP "+methodOf(c), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(requestTime(c)),
		trace.WithAttributes(attribute.String("http.request.method", methodOf(c)), attribute.String("gateway.request_id", requestID(c))))
	c.Locals(spanKey{}, ctx)
	return span
}

// endSpan names the span after the route template, as the semantic
// conventions do, and records the status.
func (s *Server) endSpan(c *fiber.Ctx, span trace.Span, code int) {
	route := routeOf(c)
	span.SetName(methodOf(c) + " " + route)
	span.SetAttributes(attribute.String("http.route", route), attribute.Int("http.response.status_code", code))
	if x := c.Response().Header.Peek("X-Cache"); len(x) > 0 {
		span.SetAttributes(attribute.String("gateway.cache", string(x)))
	}
	if code >= fiber.StatusInternalServerError {
		span.SetStatus(codes.Error, "")
	}
	span.End()
}

// spanContext is the context of the request's span, or Background.
func spanContext(c *fiber.Ctx) context.Context {
	if ctx, ok := c.Locals(spanKey{}).(context.Context); ok {
		return ctx
	}
	return context.Background()
}

// traceAttr is the log attribute naming the request's trace, when there is
// one.
func traceAttr(c *fiber.Ctx) (slog.Attr, bool) {
	sc := trace.SpanContextFromContext(spanContext(c))
	if !sc.IsValid() {
		return slog.Attr{}, false
	}
	return slog.String("traceId", sc.TraceID().String()), true
}

// headerCarrier reads W3C trace context from a request's headers.
type headerCarrier struct{ h *fasthttp.RequestHeader }

var _ propagation.TextMapCarrier = headerCarrier{}

func (hc headerCarrier) Get(key string) string { return string(hc.h.Peek(key)) }
func (hc headerCarrier) Set(string, string)    {}
func (hc headerCarrier) Keys() []string {
	var keys []string
	for k := range hc.h.All() {
		keys = append(keys, string(k))
	}
	return keys
}
