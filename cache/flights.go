package cache

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"golang.org/x/sync/singleflight"

	"github.com/realty-gateway/gateway/upstream"
)

// flights coalesce the loads of a key in this process: singleflight while
// Redis is trusted and this process hears other gateways' writes, and
// otherwise queued flights (queued.go), which a caller never joins once they
// have begun: another gateway's write may then go unannounced here, and
// nothing would tell this process to forget a flight that read the old
// version (Cache.shareFlights).
type flights struct {
	group  singleflight.Group
	queued queuedFlights
}

// join runs fn for name, or shares the flight under way, and returns its
// result, or ctx's error once ctx ends first while the flight goes on for
// the others. A caller whose deadline leaves the load's whole bound runs
// or joins the flight on its own goroutine (no goroutine per flight,
// whose stack would grow on every miss); a cancellation before its
// deadline then waits for the flight.
func (f *flights) join(ctx context.Context, name string, trusted bool, loadTimeout time.Duration, fn func() (any, error)) (singleflight.Result, error) {
	var ch <-chan singleflight.Result
	switch {
	case !trusted:
		ch = f.queued.doChan(name, fn)
	case outlasts(ctx, loadTimeout):
		v, err, shared := f.group.Do(name, fn)
		return singleflight.Result{Val: v, Err: err, Shared: shared}, nil
	default:
		ch = f.group.DoChan(name, fn)
	}
	select {
	case <-ctx.Done():
		return singleflight.Result{}, ctx.Err()
	case res := <-ch:
		return res, nil
	}
}

// forget has later callers start a new flight of name: the one under way
// may have read a version that a write has replaced since.
func (f *flights) forget(name string) { f.group.Forget(name) }

// outlasts reports whether ctx's deadline leaves a whole load's bound:
// then waiting for a flight cannot outlast the caller's deadline. Without
// a deadline the caller waits on a channel, so that it can leave early.
func outlasts(ctx context.Context, loadTimeout time.Duration) bool {
	deadline, ok := ctx.Deadline()
	return ok && ctx.Err() == nil && time.Until(deadline) >= loadTimeout
}

// traceWait starts the span of a flight's wait, if tracing is on, and
// returns the function that ends it.
func (c *Cache) traceWait(ctx context.Context) (context.Context, func(shared bool, err error)) {
	if c.tracer == nil {
		return ctx, endNoSpan
	}
	ctx, span := c.tracer.Start(ctx, "cache singleflight")
	return ctx, func(shared bool, err error) {
		span.SetAttributes(attribute.Bool("singleflight.shared", shared))
		if err != nil && !errors.Is(err, upstream.ErrNotFound) {
			span.SetStatus(codes.Error, "load failed")
		}
		span.End()
	}
}

func endNoSpan(bool, error) {}
