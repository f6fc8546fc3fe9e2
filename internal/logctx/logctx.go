// Package logctx carries a request's id in its context, so that every log
// line written with that context (slog's *Context methods) names the
// request, and the trace when one is recording, however deep the code
// that writes it.
//
// Concurrency: everything here is safe for concurrent use.
package logctx

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

type requestIDKey struct{}

// WithRequestID returns ctx carrying the request id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID is the request id that ctx carries, if any.
func RequestID(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(requestIDKey{}).(string)
	return id, ok
}

// Handler adds "requestId" and "traceId" to each record from the record's
// context, where it has them. Under WithGroup they land in the group, as
// any attribute added to a record does: the gateway's loggers use none.
type Handler struct{ next slog.Handler }

var _ slog.Handler = Handler{}

// NewHandler wraps next.
func NewHandler(next slog.Handler) Handler { return Handler{next: next} }

func (h Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h Handler) Handle(ctx context.Context, r slog.Record) error {
	if ctx != nil {
		if id, ok := RequestID(ctx); ok {
			r.AddAttrs(slog.String("requestId", id))
		}
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			r.AddAttrs(slog.String("traceId", sc.TraceID().String()))
		}
	}
	return h.next.Handle(ctx, r)
}

func (h Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return Handler{next: h.next.WithAttrs(attrs)}
}
func (h Handler) WithGroup(name string) slog.Handler { return Handler{next: h.next.WithGroup(name)} }
