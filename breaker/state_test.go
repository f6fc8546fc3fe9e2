package breaker

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
)

// The numbers are the gateway_breaker_state gauge's values and must not
// change.
func TestStateValuesAndNames(t *testing.T) {
	for s, want := range map[State]struct {
		n    int
		name string
	}{Closed: {0, "closed"}, HalfOpen: {1, "half-open"}, Open: {2, "open"}} {
		if int(s) != want.n || s.String() != want.name {
			t.Errorf("state %d %q, want %d %q", int(s), s, want.n, want.name)
		}
	}
}

func TestStateOfFollowsTheBreaker(t *testing.T) {
	st := FastFail("test", slog.New(slog.DiscardHandler))
	// A second open: the check that it is open comes well within it on a
	// busy machine.
	st.Timeout = time.Second
	cb := gobreaker.NewCircuitBreaker[struct{}](st)
	if got := StateOf(cb); got != Closed {
		t.Fatalf("new breaker %v, want closed", got)
	}
	fail := func() (struct{}, error) { return struct{}{}, errors.New("down") }
	for range 3 {
		_, _ = cb.Execute(fail)
	}
	if got := StateOf(cb); got != Open {
		t.Fatalf("after three failures %v, want open", got)
	}
	time.Sleep(st.Timeout + 100*time.Millisecond)
	if got := StateOf(cb); got != HalfOpen {
		t.Fatalf("after the open time %v, want half-open", got)
	}
}
