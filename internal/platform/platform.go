// Package platform opens the parts the gateway runs on from their
// configuration: the store, the Redis client, the listing cache over them,
// the tracer provider, the runtime's memory limit and the generated JWT
// secret. serve and the admin commands both open their parts here.
//
// The functions keep no state and may be called from any goroutine, except
// that OpenTracing sets the OpenTelemetry SDK's process-wide hooks and
// SetMemoryLimit the runtime's limit: serve calls those once, at start.
package platform
