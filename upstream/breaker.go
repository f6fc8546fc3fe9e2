package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sony/gobreaker/v2"
)

// BreakerConfig bounds every guarded store call.
type BreakerConfig struct {
	// CallTimeout is the deadline of one store call.
	CallTimeout time.Duration
	// MaxConcurrent is the bulkhead: at most this many store calls run at
	// once; the others wait within their deadline and then fail.
	MaxConcurrent int
	// Window and Bucket form the rolling window over which the failure
	// ratio is computed.
	Window, Bucket time.Duration
	// The breaker opens when at least MinRequests finished in the window
	// and at least FailureRatio of them failed.
	MinRequests  uint32
	FailureRatio float64
	// OpenFor is how long the breaker stays open before half-open probes.
	OpenFor time.Duration
	// HalfOpenProbes is how many probes may run while half-open.
	HalfOpenProbes uint32
}

// Guarded wraps the calls of a Store that serve requests with a deadline,
// a bulkhead and a circuit breaker. It keeps the domain answers (ErrNotFound,
// ErrConflict, ErrInvalid) as they are, translates every other failure into
// ErrUnavailable, and passes a caller's cancellation through without
// counting it against the store. While the breaker is open, calls
// fail at once without waiting for a bulkhead slot.
type Guarded struct {
	store   Store
	cb      *gobreaker.CircuitBreaker[any]
	slots   chan struct{}
	timeout time.Duration
}

// NewGuarded guards store with the given limits.
func NewGuarded(store Store, cfg BreakerConfig, log *slog.Logger) *Guarded {
	minRequests, ratio := cfg.MinRequests, cfg.FailureRatio
	cb := gobreaker.NewCircuitBreaker[any](gobreaker.Settings{
		Name:         "store",
		MaxRequests:  cfg.HalfOpenProbes,
		Interval:     cfg.Window,
		BucketPeriod: cfg.Bucket,
		Timeout:      cfg.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			// Requests also counts calls still running; only finished
			// ones make the ratio.
			finished := c.TotalSuccesses + c.TotalFailures
			return finished >= minRequests && float64(c.TotalFailures) >= ratio*float64(finished)
		},
		IsSuccessful: func(err error) bool {
			// The store answered: only failures to answer count.
			return err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) || errors.Is(err, ErrInvalid)
		},
		IsExcluded: func(err error) bool {
			return errors.Is(err, errCallerGone)
		},
		OnStateChange: LogStateChanges(log),
	})
	return &Guarded{
		store:   store,
		cb:      cb,
		slots:   make(chan struct{}, max(cfg.MaxConcurrent, 1)),
		timeout: cfg.CallTimeout,
	}
}

// LogStateChanges returns a gobreaker OnStateChange that logs each
// transition; transitions, not failures, are what an outage logs.
func LogStateChanges(log *slog.Logger) func(name string, from, to gobreaker.State) {
	return func(name string, from, to gobreaker.State) {
		log.Warn("breaker state changed", "breaker", name, "from", from.String(), "to", to.String())
	}
}

// FastFail returns the settings of a breaker for a dependency that has a
// fallback (the cache tier, the rate limits' Redis): after three failures
// in a row it skips the dependency for a second, so an outage costs one
// fast error per call instead of a timeout; then one probe tests it. A
// caller's cancellation counts for nothing.
func FastFail(name string, log *slog.Logger) gobreaker.Settings {
	return gobreaker.Settings{
		Name:          name,
		MaxRequests:   1,
		Timeout:       time.Second,
		ReadyToTrip:   func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 3 },
		IsExcluded:    func(err error) bool { return errors.Is(err, context.Canceled) },
		OnStateChange: LogStateChanges(log),
	}
}

// Open reports whether the breaker currently rejects calls.
func (g *Guarded) Open() bool {
	return g.cb.State() == gobreaker.StateOpen
}

// ListingByID reads a listing by its id.
func (g *Guarded) ListingByID(ctx context.Context, id int64) (Listing, error) {
	return guard(ctx, g, func(ctx context.Context) (Listing, error) {
		return g.store.ListingByID(ctx, id)
	})
}

// ListingByNumber reads a listing by its firm and number.
func (g *Guarded) ListingByNumber(ctx context.Context, firmID, no int64) (Listing, error) {
	return guard(ctx, g, func(ctx context.Context) (Listing, error) {
		return g.store.ListingByNumber(ctx, firmID, no)
	})
}

// FirmByKeyDigest finds a firm by the digest of its API key.
func (g *Guarded) FirmByKeyDigest(ctx context.Context, digest []byte) (Firm, error) {
	return guard(ctx, g, func(ctx context.Context) (Firm, error) {
		return g.store.FirmByKeyDigest(ctx, digest)
	})
}

// UserByEmail finds a user of a firm by e-mail.
func (g *Guarded) UserByEmail(ctx context.Context, firmID int64, email string) (User, error) {
	return guard(ctx, g, func(ctx context.Context) (User, error) {
		return g.store.UserByEmail(ctx, firmID, email)
	})
}

// errCallerGone marks a call that ended because its caller cancelled it:
// not the store's fault, so the breaker excludes it. A caller's deadline
// does count: the store was slower than the caller could wait.
var errCallerGone = errors.New("caller gone")

func guard[T any](parent context.Context, g *Guarded, call func(context.Context) (T, error)) (T, error) {
	var zero T
	if g.Open() {
		return zero, fmt.Errorf("%w: %w", ErrUnavailable, gobreaker.ErrOpenState)
	}
	ctx, cancel := context.WithTimeout(parent, g.timeout)
	defer cancel()

	select {
	case g.slots <- struct{}{}:
	case <-ctx.Done():
		if errors.Is(parent.Err(), context.Canceled) {
			return zero, parent.Err()
		}
		return zero, fmt.Errorf("store bulkhead full: %w", ErrUnavailable)
	}
	defer func() { <-g.slots }()

	v, err := g.cb.Execute(func() (any, error) {
		v, err := call(ctx)
		if err != nil && errors.Is(parent.Err(), context.Canceled) {
			return v, fmt.Errorf("%w: %w", errCallerGone, parent.Err())
		}
		return v, err
	})
	switch {
	case err == nil:
		return v.(T), nil
	case errors.Is(err, errCallerGone):
		return zero, parent.Err()
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrConflict), errors.Is(err, ErrInvalid):
		return zero, err
	default:
		return zero, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
}

// ImportListings stores new listings; see Store.
func (g *Guarded) ImportListings(ctx context.Context, ls []Listing) ([]Listing, error) {
	return guard(ctx, g, func(ctx context.Context) ([]Listing, error) {
		return g.store.ImportListings(ctx, ls)
	})
}

// UpdateListing replaces a listing; see Store.
func (g *Guarded) UpdateListing(ctx context.Context, l Listing) (Listing, error) {
	return guard(ctx, g, func(ctx context.Context) (Listing, error) {
		return g.store.UpdateListing(ctx, l)
	})
}

// DeleteListing deletes a listing; see Store.
func (g *Guarded) DeleteListing(ctx context.Context, firmID, id int64) (Listing, error) {
	return guard(ctx, g, func(ctx context.Context) (Listing, error) {
		return g.store.DeleteListing(ctx, firmID, id)
	})
}
