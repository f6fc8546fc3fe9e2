package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/realty-gateway/gateway/breaker"
)

// Guarded wraps the calls of a Store that serve requests in a
// breaker.Guard: a deadline, a bulkhead and a circuit breaker. It keeps the
// store's answers (see Answered) as they are, translates every other
// failure into ErrUnavailable, and passes a caller's cancellation through
// without counting it against the store.
type Guarded struct {
	store Store
	guard *breaker.Guard
}

// NewGuarded guards store.
func NewGuarded(store Store, cfg breaker.Config, lim breaker.Limits, log *slog.Logger) *Guarded {
	return &Guarded{store: store, guard: breaker.NewGuard("store", cfg, lim, Answered, log)}
}

// Answered reports whether err is the store's answer (none, or not found,
// conflict or invalid) rather than a failure to answer.
func Answered(err error) bool {
	return err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) || errors.Is(err, ErrInvalid)
}

// Open reports whether the breaker currently rejects calls.
func (g *Guarded) Open() bool { return g.guard.Open() }

// The Store methods that serve requests go through guard.

func (g *Guarded) ListingByID(ctx context.Context, id int64) (Listing, error) {
	return guard(ctx, g, func(ctx context.Context) (Listing, error) {
		return g.store.ListingByID(ctx, id)
	})
}

func (g *Guarded) ListingByNumber(ctx context.Context, firmID, no int64) (Listing, error) {
	return guard(ctx, g, func(ctx context.Context) (Listing, error) {
		return g.store.ListingByNumber(ctx, firmID, no)
	})
}

func (g *Guarded) FirmByKeyDigest(ctx context.Context, digest []byte) (Firm, error) {
	return guard(ctx, g, func(ctx context.Context) (Firm, error) {
		return g.store.FirmByKeyDigest(ctx, digest)
	})
}

func (g *Guarded) UserByEmail(ctx context.Context, firmID int64, email string) (User, error) {
	return guard(ctx, g, func(ctx context.Context) (User, error) {
		return g.store.UserByEmail(ctx, firmID, email)
	})
}

func guard[T any](ctx context.Context, g *Guarded, call func(context.Context) (T, error)) (T, error) {
	v, err := breaker.Do(ctx, g.guard, call)
	switch {
	case Answered(err), errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return v, err
	default:
		return v, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
}

func (g *Guarded) ImportListings(ctx context.Context, ls []Listing) ([]Listing, error) {
	return guard(ctx, g, func(ctx context.Context) ([]Listing, error) {
		return g.store.ImportListings(ctx, ls)
	})
}

func (g *Guarded) UpdateListing(ctx context.Context, l Listing) (Listing, error) {
	return guard(ctx, g, func(ctx context.Context) (Listing, error) {
		return g.store.UpdateListing(ctx, l)
	})
}

func (g *Guarded) DeleteListing(ctx context.Context, firmID, id int64) (Listing, error) {
	return guard(ctx, g, func(ctx context.Context) (Listing, error) {
		return g.store.DeleteListing(ctx, firmID, id)
	})
}
