package breaker

import "github.com/sony/gobreaker/v2"

// State is a breaker's state. Its numbers are the values of the
// gateway_breaker_state gauge: 0 closed, 1 half-open, 2 open.
type State int

const (
	// Closed lets every call through.
	Closed State = iota
	// HalfOpen lets a few probes through to test the dependency.
	HalfOpen
	// Open rejects every call until its time is up.
	Open
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	default:
		return "unknown"
	}
}

// StateOf is the state of a gobreaker breaker, such as one built from
// FastFail's settings.
func StateOf[T any](cb *gobreaker.CircuitBreaker[T]) State {
	switch cb.State() {
	case gobreaker.StateHalfOpen:
		return HalfOpen
	case gobreaker.StateOpen:
		return Open
	default:
		return Closed
	}
}
