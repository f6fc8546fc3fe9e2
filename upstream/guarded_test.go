package upstream_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/realty-gateway/gateway/breaker"
	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/upstream"
	"github.com/realty-gateway/gateway/upstream/sqlite"
)

// quiet is the logger of every Guarded under test.
func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newGuarded guards store, failing t if it cannot.
func newGuarded(t *testing.T, store upstream.Store, cfg breaker.Config, lim breaker.Limits) *upstream.Guarded {
	t.Helper()
	g, err := upstream.NewGuarded(store, cfg, lim, upstream.GuardedDeps{Log: quiet()})
	if err != nil {
		t.Fatalf("NewGuarded: %v", err)
	}
	return g
}

// countingStore is the real store with a count of the listing lookups that
// reached it.
type countingStore struct {
	upstream.Store
	calls atomic.Int64
}

func (s *countingStore) ListingByID(ctx context.Context, id int64) (upstream.Listing, error) {
	s.calls.Add(1)
	return s.Store.ListingByID(ctx, id)
}

// openSQLite opens a real store in a temporary directory, with one firm, one
// user and one listing, and returns the store and the listing's id.
func openSQLite(t *testing.T) (*sqlite.Store, int64) {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, t.TempDir()+"/s.db")
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	firm, err := s.AddFirm(ctx, "Firm", []byte("digest-of-the-key-of-the-firm-00"))
	if err != nil {
		t.Fatalf("AddFirm: %v", err)
	}
	user, err := s.AddUser(ctx, upstream.User{FirmID: firm.ID, Email: "u@example.com", PasswordHash: "h"})
	if err != nil {
		t.Fatalf("AddUser: %v", err)
	}
	ls, err := s.ImportListings(ctx, []upstream.Listing{{ID: 7, No: 1, Title: "Flat", FirmID: firm.ID, FirmUserID: user.ID}})
	if err != nil {
		t.Fatalf("ImportListings: %v", err)
	}
	return s, ls[0].ID
}

func TestGuardedRealStore(t *testing.T) {
	cfg := breaker.Config{Window: time.Minute, Bucket: time.Second, MinRequests: 5, FailureRatio: 0.5, OpenFor: time.Minute, Probes: 1}
	lim := breaker.Limits{CallTimeout: time.Second, MaxConcurrent: 4}
	const unknownID = 999_999
	tests := []struct {
		name       string
		closeStore bool
		giveID     int64 // 0: the seeded listing
		calls      int
		wantErr    error // nil: the listing is returned
		wantOpen   bool
		wantStore  int64 // lookups that reached the store
	}{
		{
			name:      "found listings keep the breaker closed",
			calls:     50,
			wantStore: 50,
		},
		{
			name:      "not found is a success to the breaker",
			giveID:    unknownID,
			calls:     50,
			wantErr:   upstream.ErrNotFound,
			wantStore: 50,
		},
		{
			name:       "a closed store opens the breaker after MinRequests failures",
			closeStore: true,
			calls:      50,
			wantErr:    upstream.ErrUnavailable,
			wantOpen:   true,
			wantStore:  5,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sq, seededID := openSQLite(t)
			id := tt.giveID
			if id == 0 {
				id = seededID
			}
			if tt.closeStore {
				if err := sq.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
			}
			store := &countingStore{Store: sq}
			g := newGuarded(t, store, cfg, lim)

			for i := range tt.calls {
				start := time.Now()
				l, err := g.ListingByID(context.Background(), id)
				if elapsed := time.Since(start); elapsed > testenv.Patience() {
					t.Fatalf("call %d took %v; want it answered, not hung", i+1, elapsed)
				}
				if tt.wantErr == nil {
					if err != nil || l.ID != id {
						t.Fatalf("call %d: ListingByID(%d) = id %d, %v; want id %d, nil", i+1, id, l.ID, err, id)
					}
					continue
				}
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("call %d: ListingByID(%d) error = %v; want %v", i+1, id, err, tt.wantErr)
				}
				if tt.wantOpen && uint32(i) >= cfg.MinRequests && !errors.Is(err, gobreaker.ErrOpenState) {
					t.Fatalf("call %d after the breaker opened: error = %v; want it rejected by the open breaker", i+1, err)
				}
			}
			if got := g.Open(); got != tt.wantOpen {
				t.Errorf("Open() = %v; want %v", got, tt.wantOpen)
			}
			if got := store.calls.Load(); got != tt.wantStore {
				t.Errorf("store calls = %d; want %d", got, tt.wantStore)
			}
		})
	}
}

var errStoreDown = errors.New("stand-in store down")

// standIn is a store whose first failFirst lookups fail at once and whose
// later lookups block until their ctx is done or release is closed. Every
// blocking lookup announces itself on entered.
type standIn struct {
	upstream.Store // nil: only ListingByID is used

	failFirst int64
	calls     atomic.Int64
	entered   chan struct{}
	release   chan struct{}
}

func newStandIn(failFirst int64) *standIn {
	return &standIn{
		failFirst: failFirst,
		entered:   make(chan struct{}, 100),
		release:   make(chan struct{}),
	}
}

func (s *standIn) ListingByID(ctx context.Context, id int64) (upstream.Listing, error) {
	if s.calls.Add(1) <= s.failFirst {
		return upstream.Listing{}, errStoreDown
	}
	s.entered <- struct{}{}
	select {
	case <-ctx.Done():
		return upstream.Listing{}, ctx.Err()
	case <-s.release:
		return upstream.Listing{ID: id}, nil
	}
}

// lookup starts a lookup and returns the channel of its error.
func lookup(ctx context.Context, g *upstream.Guarded) <-chan error {
	errc := make(chan error, 1)
	go func() {
		_, err := g.ListingByID(ctx, 1)
		errc <- err
	}()
	return errc
}

// waitEntered waits until a lookup blocks in the store; errc is that
// lookup's, so that a lookup that never reaches the store fails the test
// instead of hanging it.
func waitEntered(t *testing.T, s *standIn, errc <-chan error) {
	t.Helper()
	select {
	case <-s.entered:
	case err := <-errc:
		t.Fatalf("lookup returned %v before reaching the store", err)
	case <-time.After(testenv.Patience()):
		t.Fatal("lookup did not reach the store (GATEWAY_TEST_PATIENCE)")
	}
}

// result waits for a lookup's error.
func result(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(testenv.Patience()):
		t.Fatal("lookup did not return (GATEWAY_TEST_PATIENCE)")
		return nil
	}
}

func TestGuardedHungStoreTimesOut(t *testing.T) {
	tests := []struct {
		name        string
		giveTimeout time.Duration
	}{
		{name: "100ms call timeout", giveTimeout: 100 * time.Millisecond},
		{name: "300ms call timeout", giveTimeout: 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStandIn(0)
			g := newGuarded(t, store,
				breaker.Config{Window: time.Minute, Bucket: time.Second, MinRequests: 5, FailureRatio: 0.5, OpenFor: time.Minute, Probes: 1},
				breaker.Limits{CallTimeout: tt.giveTimeout, MaxConcurrent: 1})

			start := time.Now()
			err := result(t, lookup(context.Background(), g))
			elapsed := time.Since(start)

			if !errors.Is(err, upstream.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("ListingByID on a hung store: error = %v; want ErrUnavailable wrapping context.DeadlineExceeded", err)
			}
			// The store hangs for good: returning at all, with the deadline's
			// error, is the timeout's work. How soon is a benchmark's figure.
			if elapsed < tt.giveTimeout {
				t.Errorf("ListingByID on a hung store returned after %v; want not before the %v call timeout", elapsed, tt.giveTimeout)
			}
			t.Logf("returned after %v (call timeout %v)", elapsed, tt.giveTimeout)
			if got := store.calls.Load(); got != 1 {
				t.Errorf("store calls = %d; want 1", got)
			}
		})
	}
}

func TestGuardedCallerCancellationIsNotAFailure(t *testing.T) {
	const (
		minRequests = 3
		repeats     = 10 // more than minRequests
	)
	tests := []struct {
		name string
		// holdSlot keeps the only bulkhead slot busy, so that the canceled
		// lookups wait for a slot instead of reaching the store.
		holdSlot  bool
		wantStore int64
	}{
		{name: "canceled while in the store", wantStore: repeats},
		{name: "canceled while waiting for a bulkhead slot", holdSlot: true, wantStore: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStandIn(0)
			defer close(store.release)
			g := newGuarded(t, store,
				breaker.Config{Window: time.Minute, Bucket: time.Second, MinRequests: minRequests, FailureRatio: 0.5, OpenFor: time.Minute, Probes: 1},
				breaker.Limits{CallTimeout: 10 * time.Second, MaxConcurrent: 1})

			if tt.holdSlot {
				holder := lookup(context.Background(), g)
				waitEntered(t, store, holder)
			}
			for i := range repeats {
				ctx, cancel := context.WithCancel(context.Background())
				var errc <-chan error
				if tt.holdSlot {
					cancel() // the slot is busy: only ctx.Done is ready
					errc = lookup(ctx, g)
				} else {
					errc = lookup(ctx, g)
					waitEntered(t, store, errc)
					cancel()
				}
				err := result(t, errc)
				cancel()
				if !errors.Is(err, context.Canceled) || errors.Is(err, upstream.ErrUnavailable) {
					t.Fatalf("canceled lookup %d: error = %v; want context.Canceled, not ErrUnavailable", i+1, err)
				}
			}
			if g.Open() {
				t.Errorf("Open() = true after %d canceled lookups; want false", repeats)
			}
			if got := store.calls.Load(); got != tt.wantStore {
				t.Errorf("store calls = %d; want %d", got, tt.wantStore)
			}
		})
	}
}

func TestGuardedBulkhead(t *testing.T) {
	tests := []struct {
		name          string
		maxConcurrent int
	}{
		{name: "one slot", maxConcurrent: 1},
		{name: "two slots", maxConcurrent: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStandIn(0)
			g := newGuarded(t, store,
				breaker.Config{Window: time.Minute, Bucket: time.Second, MinRequests: 5, FailureRatio: 0.5, OpenFor: time.Minute, Probes: 1},
				breaker.Limits{CallTimeout: 10 * time.Second, MaxConcurrent: tt.maxConcurrent})

			holders := make([]<-chan error, tt.maxConcurrent)
			for i := range holders {
				holders[i] = lookup(context.Background(), g)
				waitEntered(t, store, holders[i])
			}

			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := g.ListingByID(ctx, 1)
			elapsed := time.Since(start)

			if !errors.Is(err, upstream.ErrUnavailable) {
				t.Errorf("lookup with a full bulkhead: error = %v; want ErrUnavailable", err)
			}
			if elapsed > testenv.Patience() {
				t.Errorf("lookup with a full bulkhead and a 50ms deadline took %v; want it refused, not queued", elapsed)
			}
			if got, want := store.calls.Load(), int64(tt.maxConcurrent); got != want {
				t.Errorf("store calls = %d; want %d (the rejected lookup must not reach the store)", got, want)
			}

			close(store.release)
			for i, errc := range holders {
				if err := result(t, errc); err != nil {
					t.Errorf("lookup %d holding a slot: error = %v; want nil", i+1, err)
				}
			}
		})
	}
}

// waitHalfOpen polls until the open breaker lets calls through again.
func waitHalfOpen(t *testing.T, g *upstream.Guarded) {
	t.Helper()
	testenv.Eventually(t, "the breaker half-open after OpenFor", func() bool { return !g.Open() })
}

func TestGuardedHalfOpenProbesAreLimited(t *testing.T) {
	const (
		minRequests = 2
		failures    = minRequests
	)
	tests := []struct {
		name   string
		probes uint32
	}{
		{name: "one probe", probes: 1},
		{name: "two probes", probes: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStandIn(failures)
			g := newGuarded(t, store,
				breaker.Config{Window: time.Minute, Bucket: time.Second, MinRequests: minRequests, FailureRatio: 0.5, OpenFor: 100 * time.Millisecond, Probes: tt.probes},
				breaker.Limits{CallTimeout: 10 * time.Second, MaxConcurrent: 8})

			for i := range failures {
				if _, err := g.ListingByID(context.Background(), 1); !errors.Is(err, upstream.ErrUnavailable) || !errors.Is(err, errStoreDown) {
					t.Fatalf("failing lookup %d: error = %v; want ErrUnavailable wrapping the store's error", i+1, err)
				}
			}
			if !g.Open() {
				t.Fatalf("Open() = false after %d failures of %d; want true", failures, failures)
			}
			if _, err := g.ListingByID(context.Background(), 1); !errors.Is(err, gobreaker.ErrOpenState) || !errors.Is(err, upstream.ErrUnavailable) {
				t.Fatalf("lookup while open: error = %v; want ErrUnavailable from the open breaker", err)
			}
			if got := store.calls.Load(); got != failures {
				t.Fatalf("store calls while open = %d; want %d", got, failures)
			}

			waitHalfOpen(t, g)

			probes := make([]<-chan error, tt.probes)
			for i := range probes {
				probes[i] = lookup(context.Background(), g)
				waitEntered(t, store, probes[i])
			}
			start := time.Now()
			_, err := g.ListingByID(context.Background(), 1)
			if !errors.Is(err, upstream.ErrUnavailable) || !errors.Is(err, gobreaker.ErrTooManyRequests) {
				t.Errorf("lookup beyond the half-open probes: error = %v; want ErrUnavailable from too many probes", err)
			}
			if elapsed := time.Since(start); elapsed > testenv.Patience() {
				t.Errorf("lookup beyond the half-open probes took %v; want it refused, not queued", elapsed)
			}
			if got, want := store.calls.Load(), int64(failures)+int64(tt.probes); got != want {
				t.Errorf("store calls = %d; want %d (the rejected lookup must not reach the store)", got, want)
			}

			// The probes succeed: the breaker closes and lets lookups through.
			close(store.release)
			for i, errc := range probes {
				if err := result(t, errc); err != nil {
					t.Errorf("probe %d: error = %v; want nil", i+1, err)
				}
			}
			if g.Open() {
				t.Errorf("Open() = true after %d successful probes; want false", tt.probes)
			}
			if _, err := g.ListingByID(context.Background(), 1); err != nil {
				t.Errorf("lookup after the probes succeeded: error = %v; want nil", err)
			}
			if got, want := store.calls.Load(), int64(failures)+int64(tt.probes)+1; got != want {
				t.Errorf("store calls = %d; want %d", got, want)
			}
		})
	}
}

// TestNewGuardedRefusesBadSettings: NewGuarded names what it refuses,
// its breaker's settings included.
func TestNewGuardedRefusesBadSettings(t *testing.T) {
	good := func() (upstream.Store, breaker.Config, breaker.Limits, upstream.GuardedDeps) {
		return newStandIn(0), breaker.DefaultConfig(), breaker.Limits{CallTimeout: time.Second, MaxConcurrent: 1},
			upstream.GuardedDeps{Log: quiet()}
	}
	tests := []struct {
		name     string
		change   func(*upstream.Store, *breaker.Config, *breaker.Limits, *upstream.GuardedDeps)
		wantText string
	}{
		{name: "no store", change: func(s *upstream.Store, _ *breaker.Config, _ *breaker.Limits, _ *upstream.GuardedDeps) { *s = nil },
			wantText: "store"},
		{name: "no log", change: func(_ *upstream.Store, _ *breaker.Config, _ *breaker.Limits, d *upstream.GuardedDeps) { d.Log = nil },
			wantText: "log"},
		{name: "window", change: func(_ *upstream.Store, c *breaker.Config, _ *breaker.Limits, _ *upstream.GuardedDeps) { c.Window = 0 },
			wantText: "window"},
		{name: "failure ratio", change: func(_ *upstream.Store, c *breaker.Config, _ *breaker.Limits, _ *upstream.GuardedDeps) {
			c.FailureRatio = 2
		},
			wantText: "failureRatio"},
		{name: "call timeout", change: func(_ *upstream.Store, _ *breaker.Config, l *breaker.Limits, _ *upstream.GuardedDeps) {
			l.CallTimeout = 0
		},
			wantText: "callTimeout"},
		{name: "concurrency", change: func(_ *upstream.Store, _ *breaker.Config, l *breaker.Limits, _ *upstream.GuardedDeps) {
			l.MaxConcurrent = -1
		},
			wantText: "maxConcurrent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, cfg, lim, deps := good()
			tt.change(&store, &cfg, &lim, &deps)
			if _, err := upstream.NewGuarded(store, cfg, lim, deps); err == nil || !strings.Contains(err.Error(), tt.wantText) {
				t.Fatalf("error %v; want one naming %s", err, tt.wantText)
			}
		})
	}
}

// TestGuardedReportsEachCallToItsObserver: the observer given at
// construction hears every call.
func TestGuardedReportsEachCallToItsObserver(t *testing.T) {
	var got []string
	g, err := upstream.NewGuarded(newStandIn(1), breaker.DefaultConfig(), breaker.Limits{CallTimeout: time.Second, MaxConcurrent: 1},
		upstream.GuardedDeps{Log: quiet(), Observe: func(op, outcome string, _ time.Duration) { got = append(got, op+" "+outcome) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.ListingByID(context.Background(), 1); !errors.Is(err, errStoreDown) {
		t.Fatalf("error %v; want the stand-in's failure", err)
	}
	if len(got) != 1 || got[0] != "listing_by_id error" {
		t.Fatalf("observed %q; want [listing_by_id error]", got)
	}
}

// TestGuardedOpsListsEveryOp: every operation guarded.go reports is in
// GuardedOps, whose series exist from the start.
func TestGuardedOpsListsEveryOp(t *testing.T) {
	src, err := os.ReadFile("guarded.go")
	if err != nil {
		t.Fatal(err)
	}
	calls := regexp.MustCompile(`guard\(ctx, g, "([a-z_]+)"`).FindAllStringSubmatch(string(src), -1)
	if len(calls) < len(upstream.GuardedOps()) {
		t.Fatalf("found %d guarded calls, fewer than the %d ops", len(calls), len(upstream.GuardedOps()))
	}
	for _, c := range calls {
		if !slices.Contains(upstream.GuardedOps(), c[1]) {
			t.Errorf("op %q is not in GuardedOps", c[1])
		}
	}
}
