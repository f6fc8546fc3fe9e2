package platform

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"runtime/debug"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/realty-gateway/gateway/internal/config"
)

// OpenTracing returns the tracer provider exporting over OTLP/HTTP
// (protobuf) in batches, or nil when tracing is off. Its Shutdown flushes the last spans.
// The OpenTelemetry SDK reports export failures and its own diagnostics
// through process-wide hooks; OpenTracing points both at log, with any
// credentials in a URL masked, instead of the SDK's plain-text default.
func OpenTracing(ctx context.Context, cfg config.Tracing, log *slog.Logger) (*sdktrace.TracerProvider, error) {
	if !cfg.On() {
		return nil, nil
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: spans not exported", "err", maskURLCredentials(err.Error()))
	}))
	otel.SetLogger(logr.FromSlogHandler(log.Handler()))
	client, err := newOTLPClient(cfg.Export())
	if err != nil {
		return nil, err
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("tracing exporter: %w", err)
	}
	res, err := tracingResource(ctx)
	if err != nil {
		return nil, err
	}
	// The sampler comes from OTEL_TRACES_SAMPLER, by default
	// parentbased_always_on; the batcher's settings from OTEL_BSP_*.
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// urlCredentials matches the user information of a URL in a text.
var urlCredentials = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@`)

// maskURLCredentials masks the user information of every URL in s.
func maskURLCredentials(s string) string { return urlCredentials.ReplaceAllString(s, "${1}***@") }

// tracingResource names this service; OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES override it.
func tracingResource(ctx context.Context) (*resource.Resource, error) {
	version := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "realty-gateway"), attribute.String("service.version", version)),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("tracing resource: %w", err)
	}
	return res, nil
}

// ShutdownTracing flushes the spans still queued, for at most 5 s.
func ShutdownTracing(tp *sdktrace.TracerProvider, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Warn("tracing: spans lost at shutdown", "err", err)
	}
}
