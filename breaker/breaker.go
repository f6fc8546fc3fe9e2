// Package breaker owns the gateway's circuit breakers, built on
// sony/gobreaker: Guard, a ratio breaker over a rolling window with a
// deadline and a bulkhead on every call, which stands in front of the
// store; FastFail, the preset for dependencies that have a fallback
// (the cache's Redis, the login limits' Redis, the CDN's purge API); and
// State, which every component reports its breaker's state in. It knows
// nothing of listings: what counts as an answer is the caller's to say.
//
// Concurrency: a *Guard is safe for concurrent use.
package breaker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sony/gobreaker/v2"
)

// Config is the guard's breaker.
type Config struct {
	Window       time.Duration `yaml:"window" env:"WINDOW" help:"rolling window over which the failure ratio is computed"`
	Bucket       time.Duration `yaml:"bucket" env:"BUCKET" help:"the window moves in steps of this"`
	MinRequests  uint32        `yaml:"minRequests" env:"MIN_REQUESTS" help:"finished calls in the window before the breaker may open"`
	FailureRatio float64       `yaml:"failureRatio" env:"FAILURE_RATIO" help:"the breaker opens at this share of failed calls, in (0, 1]"`
	OpenFor      time.Duration `yaml:"openFor" env:"OPEN_FOR" help:"open time before half-open probes; also the Retry-After of a 503"`
	Probes       uint32        `yaml:"probes" env:"PROBES" help:"calls let through while half-open"`
}

// DefaultConfig opens at half of at least 20 calls in 30 s, for 5 s.
func DefaultConfig() Config {
	return Config{Window: 30 * time.Second, Bucket: time.Second, MinRequests: 20, FailureRatio: 0.5, OpenFor: 5 * time.Second, Probes: 3}
}

// Validate reports every setting out of its range.
func (c Config) Validate() error {
	var errs []error
	if c.Window <= 0 || c.Bucket <= 0 || c.OpenFor <= 0 {
		errs = append(errs, errors.New("breaker window, bucket and openFor must be positive"))
	}
	if c.FailureRatio <= 0 || c.FailureRatio > 1 {
		errs = append(errs, errors.New("breaker failureRatio must be in (0, 1]"))
	}
	return errors.Join(errs...)
}

// Limits bound every guarded call.
type Limits struct {
	// CallTimeout is the deadline of one call.
	CallTimeout time.Duration
	// MaxConcurrent is the bulkhead: at most this many calls run at once;
	// the others wait within their deadline and then fail.
	MaxConcurrent int
}

// ErrBulkheadFull is a call that found no slot before its deadline.
var ErrBulkheadFull = errors.New("bulkhead full")

// Guard runs calls with a deadline, a bulkhead and a circuit breaker. A
// caller's cancellation counts for nothing (gobreaker would count it as a
// failure); a caller's deadline counts, since the dependency was slower
// than the caller could wait. While the breaker is open, calls fail at
// once without waiting for a slot: gobreaker counts only finished calls
// (gobreaker #91), so the deadline and the bulkhead are what bound a hung
// dependency.
type Guard struct {
	cb      *gobreaker.CircuitBreaker[any]
	slots   chan struct{}
	timeout time.Duration
}

// Validate reports every limit out of its range.
func (l Limits) Validate() error {
	var errs []error
	if l.CallTimeout <= 0 {
		errs = append(errs, errors.New("breaker limits: callTimeout must be positive"))
	}
	if l.MaxConcurrent < 0 {
		errs = append(errs, errors.New("breaker limits: maxConcurrent must not be negative"))
	}
	return errors.Join(errs...)
}

// NewGuard returns a Guard named name. answered tells an error that is the
// dependency's answer (a "not found") from a failure to answer; answers
// count as successes. A MaxConcurrent of 0 lets one call run at a time.
func NewGuard(name string, cfg Config, lim Limits, answered func(error) bool, log *slog.Logger) (*Guard, error) {
	if err := errors.Join(cfg.Validate(), lim.Validate()); err != nil {
		return nil, fmt.Errorf("guard %s: %w", name, err)
	}
	if name == "" || answered == nil || log == nil {
		return nil, errors.New("guard: name, answered and log are required")
	}
	minRequests, ratio := cfg.MinRequests, cfg.FailureRatio
	cb := gobreaker.NewCircuitBreaker[any](gobreaker.Settings{
		Name:         name,
		MaxRequests:  cfg.Probes,
		Interval:     cfg.Window,
		BucketPeriod: cfg.Bucket,
		Timeout:      cfg.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			// Requests also counts calls still running; only finished
			// ones make the ratio.
			finished := c.TotalSuccesses + c.TotalFailures
			return finished >= minRequests && float64(c.TotalFailures) >= ratio*float64(finished)
		},
		IsSuccessful:  answered,
		IsExcluded:    func(err error) bool { return errors.Is(err, errCallerGone) },
		OnStateChange: LogStateChanges(log),
	})
	return &Guard{cb: cb, slots: make(chan struct{}, max(lim.MaxConcurrent, 1)), timeout: lim.CallTimeout}, nil
}

// Open reports whether the breaker currently rejects calls.
func (g *Guard) Open() bool { return g.cb.State() == gobreaker.StateOpen }

// State is the breaker's state.
func (g *Guard) State() State { return StateOf(g.cb) }

// errCallerGone marks a call that ended because its caller cancelled it.
var errCallerGone = errors.New("caller gone")

// Do runs call under g. It returns call's own error as it is, the parent's
// error when the caller cancelled, ErrBulkheadFull, or gobreaker's
// ErrOpenState or ErrTooManyRequests.
func Do[T any](parent context.Context, g *Guard, call func(context.Context) (T, error)) (T, error) {
	var zero T
	if g.Open() {
		return zero, gobreaker.ErrOpenState
	}
	ctx, cancel := context.WithTimeout(parent, g.timeout)
	defer cancel()

	select {
	case g.slots <- struct{}{}:
	case <-ctx.Done():
		if errors.Is(parent.Err(), context.Canceled) {
			return zero, parent.Err()
		}
		return zero, ErrBulkheadFull
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
	case errors.Is(err, errCallerGone):
		return zero, parent.Err()
	case err != nil:
		return zero, err
	}
	return v.(T), nil
}

// LogStateChanges returns a gobreaker OnStateChange that logs each
// transition; transitions, not failures, are what an outage logs.
func LogStateChanges(log *slog.Logger) func(name string, from, to gobreaker.State) {
	return func(name string, from, to gobreaker.State) {
		log.Warn("breaker state changed", "breaker", name, "from", from.String(), "to", to.String())
	}
}

// FastFail returns the settings of a breaker for a dependency that has a
// fallback: after three failures in a row it skips the dependency for a
// second, so an outage costs one fast error per call instead of a timeout;
// then one probe tests it. A caller's cancellation counts for nothing.
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
