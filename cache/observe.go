package cache

import (
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// observedTier counts the shared tier's failed operations and logs only
// the transitions between a working and a failing tier, so that an
// outage does not flood the log.
type observedTier struct {
	sharedTier
	counts *counters
	log    *slog.Logger
	down   atomic.Bool
}

func observed(t sharedTier, counts *counters, log *slog.Logger) *observedTier {
	return &observedTier{sharedTier: t, counts: counts, log: log}
}

func (o *observedTier) get(ctx context.Context, name string, l *lease) ([]byte, error) {
	b, err := o.sharedTier.get(ctx, name, l)
	o.observe(err)
	return b, err
}

func (o *observedTier) fill(ctx context.Context, names []string, r record, ttl time.Duration, l *lease) []error {
	errs := o.sharedTier.fill(ctx, names, r, ttl, l)
	for _, err := range errs {
		o.observe(err)
	}
	return errs
}

func (o *observedTier) write(ctx context.Context, writes []keyWrite) []error {
	errs := o.sharedTier.write(ctx, writes)
	for _, err := range errs {
		o.observe(err)
	}
	return errs
}

func (o *observedTier) del(ctx context.Context, name string) error {
	err := o.sharedTier.del(ctx, name)
	o.observe(err)
	return err
}

func (o *observedTier) observe(err error) {
	if err == nil {
		// A load first: a compare-and-swap on every hit would contend.
		if o.down.Load() && o.down.CompareAndSwap(true, false) {
			o.log.Info("cache tier recovered")
		}
		return
	}
	o.counts.tierErrors.Add(1)
	if o.down.CompareAndSwap(false, true) {
		o.log.Warn("cache tier failing, reading through to the store", "err", err)
	}
}

// traced records each read of the shared tier as a span "cache get" and
// each fill as "cache set": Redis commands are auto-pipelined, shared by
// the requests of a batch, so the client's own spans of them belong to no
// request.
type traced struct {
	sharedTier
	tracer trace.Tracer
}

func (t traced) get(ctx context.Context, name string, l *lease) ([]byte, error) {
	ctx, span := t.tracer.Start(ctx, "cache get")
	defer span.End()
	b, err := t.sharedTier.get(ctx, name, l)
	span.SetAttributes(attribute.Bool("cache.found", b != nil))
	if err != nil {
		span.SetStatus(codes.Error, "tier read failed")
	}
	return b, err
}

func (t traced) fill(ctx context.Context, names []string, r record, ttl time.Duration, l *lease) []error {
	ctx, span := t.tracer.Start(ctx, "cache set")
	defer span.End()
	errs := t.sharedTier.fill(ctx, names, r, ttl, l)
	if slices.ContainsFunc(errs, func(err error) bool { return err != nil }) {
		span.SetStatus(codes.Error, "tier write failed")
	}
	return errs
}
