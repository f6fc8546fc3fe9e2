package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/realty-gateway/gateway/breaker"
)

// Guarded wraps the calls of a Store that serve requests in a
// breaker.Guard: a deadline, a bulkhead and a circuit breaker. It keeps the
// store's answers (see Answered) as they are, translates every other
// failure into ErrUnavailable, and passes a caller's cancellation through
// without counting it against the store in the breaker (Observe still
// reports it as an error).
type Guarded struct {
	store   Store
	guard   *breaker.Guard
	observe func(op, outcome string, d time.Duration)
	tracer  trace.Tracer // nil: no spans
}

// GuardedOps are the operation names that Guarded reports to Observe.
func GuardedOps() []string {
	return []string{"listing_by_id", "listing_by_number", "firm_by_key", "user_by_email", "import_listings",
		"update_listing", "delete_listing", "revocations", "prune_revocations"}
}

// GuardedDeps are a Guarded's collaborators.
type GuardedDeps struct {
	Log *slog.Logger
	// Observe, when set, is told of every call with its operation,
	// outcome (ok, not_found, error, rejected) and duration.
	Observe func(op, outcome string, d time.Duration)
	// Tracer, when set, records every call as a span "store <op>".
	Tracer trace.TracerProvider
}

// NewGuarded guards store with a breaker of cfg under lim.
func NewGuarded(store Store, cfg breaker.Config, lim breaker.Limits, deps GuardedDeps) (*Guarded, error) {
	if store == nil || deps.Log == nil {
		return nil, errors.New("guarded store: store and log are required")
	}
	guard, err := breaker.NewGuard("store", cfg, lim, Answered, deps.Log)
	if err != nil {
		return nil, err
	}
	g := &Guarded{store: store, guard: guard, observe: deps.Observe}
	if g.observe == nil {
		g.observe = func(string, string, time.Duration) {}
	}
	if deps.Tracer != nil {
		g.tracer = deps.Tracer.Tracer("github.com/realty-gateway/gateway/upstream")
	}
	return g, nil
}

// BreakerState is the state of the store's breaker.
func (g *Guarded) BreakerState() breaker.State { return g.guard.State() }

// Answered reports whether err is the store's answer (none, or not found,
// conflict, invalid or a failed precondition) rather than a failure to
// answer.
func Answered(err error) bool {
	return err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) || errors.Is(err, ErrInvalid) ||
		errors.Is(err, ErrPreconditionFailed)
}

// Open reports whether the breaker currently rejects calls.
func (g *Guarded) Open() bool { return g.guard.Open() }

// BreakerClosed reports whether the store's breaker is closed: the store
// answered lately, so readiness need not ask it.
func (g *Guarded) BreakerClosed() bool { return g.BreakerState() == breaker.Closed }

// The Store methods that serve requests go through guard.

func (g *Guarded) ListingByID(ctx context.Context, id int64) (Listing, error) {
	return guard(ctx, g, "listing_by_id", func(ctx context.Context) (Listing, error) {
		return g.store.ListingByID(ctx, id)
	})
}

func (g *Guarded) ListingByNumber(ctx context.Context, firmID, no int64) (Listing, error) {
	return guard(ctx, g, "listing_by_number", func(ctx context.Context) (Listing, error) {
		return g.store.ListingByNumber(ctx, firmID, no)
	})
}

func (g *Guarded) EncodedByID(ctx context.Context, id int64) (Encoded, error) {
	return guard(ctx, g, "listing_by_id", func(ctx context.Context) (Encoded, error) {
		return g.store.EncodedByID(ctx, id)
	})
}

func (g *Guarded) EncodedByNumber(ctx context.Context, firmID, no int64) (Encoded, error) {
	return guard(ctx, g, "listing_by_number", func(ctx context.Context) (Encoded, error) {
		return g.store.EncodedByNumber(ctx, firmID, no)
	})
}

func (g *Guarded) FirmByKeyDigest(ctx context.Context, digest []byte) (Firm, error) {
	return guard(ctx, g, "firm_by_key", func(ctx context.Context) (Firm, error) {
		return g.store.FirmByKeyDigest(ctx, digest)
	})
}

func (g *Guarded) UserByEmail(ctx context.Context, firmID int64, email string) (User, error) {
	return guard(ctx, g, "user_by_email", func(ctx context.Context) (User, error) {
		return g.store.UserByEmail(ctx, firmID, email)
	})
}

func guard[T any](ctx context.Context, g *Guarded, op string, call func(context.Context) (T, error)) (T, error) {
	var span trace.Span
	if g.tracer != nil {
		ctx, span = g.tracer.Start(ctx, "store "+op, trace.WithSpanKind(trace.SpanKindClient))
	}
	began := time.Now()
	v, err := breaker.Do(ctx, g.guard, call)
	outcome := "error"
	switch {
	case errors.Is(err, ErrNotFound):
		outcome = "not_found"
	case Answered(err): // none, or a conflict or invalid input: the store answered
		outcome = "ok"
	case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests), errors.Is(err, breaker.ErrBulkheadFull):
		outcome = "rejected"
	}
	g.observe(op, outcome, time.Since(began))
	if span != nil {
		span.SetAttributes(attribute.String("store.outcome", outcome))
		if outcome == "error" || outcome == "rejected" {
			span.SetStatus(codes.Error, outcome)
		}
		span.End()
	}
	switch {
	case Answered(err), errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return v, err
	default:
		return v, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
}

func (g *Guarded) ImportListings(ctx context.Context, ls []Listing) ([]Listing, error) {
	return guard(ctx, g, "import_listings", func(ctx context.Context) ([]Listing, error) {
		return g.store.ImportListings(ctx, ls)
	})
}

func (g *Guarded) UpdateListing(ctx context.Context, l Listing, cond Precondition) (Listing, error) {
	return guard(ctx, g, "update_listing", func(ctx context.Context) (Listing, error) {
		return g.store.UpdateListing(ctx, l, cond)
	})
}

func (g *Guarded) DeleteListing(ctx context.Context, firmID, id int64, cond Precondition) (Listing, error) {
	return guard(ctx, g, "delete_listing", func(ctx context.Context) (Listing, error) {
		return g.store.DeleteListing(ctx, firmID, id, cond)
	})
}

// Revocations and PruneRevocations serve the token check: every gateway
// loads and polls the revocations in force.

func (g *Guarded) Revocations(ctx context.Context, since time.Time) ([]Revocation, error) {
	return guard(ctx, g, "revocations", func(ctx context.Context) ([]Revocation, error) {
		return g.store.Revocations(ctx, since)
	})
}

func (g *Guarded) PruneRevocations(ctx context.Context, before time.Time) (int64, error) {
	return guard(ctx, g, "prune_revocations", func(ctx context.Context) (int64, error) {
		return g.store.PruneRevocations(ctx, before)
	})
}
