package feed

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/upstream"
)

// flakyFeed is a store's feed whose sessions fail on demand: the first
// Pending that reads a change once armed runs fault instead of answering.
// It records who acquired the feed and how often a session was closed.
type flakyFeed struct {
	upstream.Feed
	lease time.Duration // the sessions' lease
	fault func(ctx context.Context, s *flakySession) error
	armed atomic.Bool
	fired atomic.Int64

	mu       sync.Mutex
	acquired []string // the holders of every session given out, in order
	closed   int
}

func (f *flakyFeed) Acquire(ctx context.Context, holder string) (upstream.FeedSession, error) {
	sess, err := f.Feed.Acquire(ctx, holder)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acquired = append(f.acquired, holder)
	return &flakySession{FeedSession: sess, feed: f}, nil
}

func (f *flakyFeed) holders() ([]string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.acquired), f.closed
}

// flakySession is one session of a flakyFeed. Once cut, every call waits
// for its context to end and fails, as over a silent partition.
type flakySession struct {
	upstream.FeedSession
	feed *flakyFeed
	cut  atomic.Bool
}

func (s *flakySession) partitioned(ctx context.Context) error {
	if !s.cut.Load() {
		return nil
	}
	<-ctx.Done()
	return fmt.Errorf("partitioned: %w", ctx.Err())
}

func (s *flakySession) Lease() time.Duration { return s.feed.lease }

func (s *flakySession) Close(ctx context.Context) error {
	s.feed.mu.Lock()
	s.feed.closed++
	s.feed.mu.Unlock()
	return s.FeedSession.Close(ctx)
}

func (s *flakySession) Pending(ctx context.Context, settle time.Duration, limit int) ([]upstream.Change, error) {
	if err := s.partitioned(ctx); err != nil {
		return nil, err
	}
	cs, err := s.FeedSession.Pending(ctx, settle, limit)
	if err != nil || len(cs) == 0 || !s.feed.armed.CompareAndSwap(true, false) {
		return cs, err
	}
	s.feed.fired.Add(1)
	return nil, s.feed.fault(ctx, s)
}

func (s *flakySession) Renew(ctx context.Context) error {
	if err := s.partitioned(ctx); err != nil {
		return err
	}
	return s.FeedSession.Renew(ctx)
}

func (s *flakySession) Unpurged(ctx context.Context, after time.Duration, limit int) ([]upstream.Change, error) {
	if err := s.partitioned(ctx); err != nil {
		return nil, err
	}
	return s.FeedSession.Unpurged(ctx, after, limit)
}

func (s *flakySession) Listings(ctx context.Context, ids []int64) (map[int64]upstream.ListingState, error) {
	if err := s.partitioned(ctx); err != nil {
		return nil, err
	}
	return s.FeedSession.Listings(ctx, ids)
}

func (s *flakySession) KeepBodies(ctx context.Context, ids []int64) error {
	if err := s.partitioned(ctx); err != nil {
		return err
	}
	return s.FeedSession.KeepBodies(ctx, ids)
}

func (s *flakySession) StaleBodies(ctx context.Context, after int64, limit int) ([]int64, error) {
	if err := s.partitioned(ctx); err != nil {
		return nil, err
	}
	return s.FeedSession.StaleBodies(ctx, after, limit)
}

func (s *flakySession) MarkApplied(ctx context.Context, seqs []int64, done bool) error {
	if err := s.partitioned(ctx); err != nil {
		return err
	}
	return s.FeedSession.MarkApplied(ctx, seqs, done)
}

func (s *flakySession) MarkDone(ctx context.Context, seqs []int64) error {
	if err := s.partitioned(ctx); err != nil {
		return err
	}
	return s.FeedSession.MarkDone(ctx, seqs)
}

func (s *flakySession) Adopt(ctx context.Context, redisIdentity string, replay time.Duration) (int64, error) {
	if err := s.partitioned(ctx); err != nil {
		return 0, err
	}
	return s.FeedSession.Adopt(ctx, redisIdentity, replay)
}

func (s *flakySession) AwaitUndone(ctx context.Context, wait time.Duration) (bool, error) {
	if err := s.partitioned(ctx); err != nil {
		return false, err
	}
	return s.FeedSession.AwaitUndone(ctx, wait)
}

func (s *flakySession) Backlog(ctx context.Context) (int64, time.Duration, error) {
	if err := s.partitioned(ctx); err != nil {
		return 0, 0, err
	}
	return s.FeedSession.Backlog(ctx)
}

func (s *flakySession) Prune(ctx context.Context, keep time.Duration, limit int) (int64, error) {
	if err := s.partitioned(ctx); err != nil {
		return 0, err
	}
	return s.FeedSession.Prune(ctx, keep, limit)
}

// slowTarget is a Target whose every Apply once armed takes hold, unless
// its context ends first.
type slowTarget struct {
	Target
	hold  time.Duration
	armed atomic.Bool
	fired atomic.Int64
}

func (t *slowTarget) Apply(ctx context.Context, changes []cache.Update) []error {
	if t.armed.Load() {
		t.fired.Add(1)
		select {
		case <-time.After(t.hold):
		case <-ctx.Done():
			errs := make([]error, len(changes))
			for i := range errs {
				errs[i] = context.Cause(ctx)
			}
			return errs
		}
	}
	return t.Target.Apply(ctx, changes)
}

// runConsumer runs a consumer named holder on store and target until the
// test ends.
func runConsumer(t *testing.T, store upstream.Feed, target Target, holder string) *Consumer {
	t.Helper()
	c, err := New(fastConfig(), Deps{Store: store, Target: target, Holder: holder, CacheLifetime: time.Hour,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.Run(ctx) })
	t.Cleanup(func() { stop(); wg.Wait() })
	return c
}

// TestConsumerRidesOutStoreFailures: consumer A holds the feed and B
// waits for it; the Pending call of A's that reads a change fails, or its
// Apply to the caches takes longer than the lease. A failure that a
// renewal shows to be no loss of the hold (a timeout, a call that
// outlasts the lease) is retried on the same session, and a slow Apply is
// given the time while the session is renewed: A keeps the feed, B never
// gets it, and the change is applied. A session that can no longer be
// renewed (a partition) gives the feed up, and B applies the change.
func TestConsumerRidesOutStoreFailures(t *testing.T) {
	const lease = 500 * time.Millisecond
	tests := []struct {
		name        string
		fault       func(ctx context.Context, s *flakySession) error // of Pending
		applyFor    time.Duration                                    // of Apply
		wantHolders []string
	}{
		{
			name: "timeout",
			fault: func(context.Context, *flakySession) error {
				return fmt.Errorf("pending changes: timeout: %w", context.DeadlineExceeded)
			},
			wantHolders: []string{"A"},
		},
		{
			name: "call outlasts the lease",
			fault: func(ctx context.Context, _ *flakySession) error {
				<-ctx.Done()
				return fmt.Errorf("pending changes: timeout: %w", ctx.Err())
			},
			wantHolders: []string{"A"},
		},
		{
			name:        "apply outlasts the lease",
			applyFor:    4 * lease,
			wantHolders: []string{"A"},
		},
		{
			name: "partition",
			fault: func(ctx context.Context, s *flakySession) error {
				s.cut.Store(true)
				return s.partitioned(ctx)
			},
			wantHolders: []string{"A", "B"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			store := &flakyFeed{Feed: f.store, lease: lease, fault: tt.fault}
			target := &slowTarget{Target: f.cache, hold: tt.applyFor}
			a := runConsumer(t, store, target, "A")
			testenv.WaitFor(t, func() bool { return a.Stats().Consumer && f.count(t, "done_at IS NULL") == 0 })
			b := runConsumer(t, store, target, "B")
			time.Sleep(2 * acquireEvery) // B has tried

			store.armed.Store(tt.fault != nil)
			target.armed.Store(tt.applyFor > 0)
			if _, err := f.raw.Exec(`UPDATE listings SET document = replace(document, '"title":"v1"', '"title":"v2"') WHERE id = ?`, f.listing.ID); err != nil {
				t.Fatal(err)
			}
			testenv.WaitFor(t, func() bool {
				return strings.Contains(f.title(t), `"title":"v2"`) && f.count(t, "done_at IS NULL") == 0
			})
			if n := store.fired.Load() + target.fired.Load(); n != 1 {
				t.Fatalf("the fault ran %d times; want once", n)
			}
			holders, closed := store.holders()
			if !slices.Equal(holders, tt.wantHolders) {
				t.Fatalf("the feed was acquired by %q (%d sessions closed); want %q", holders, closed, tt.wantHolders)
			}
			keeps := len(tt.wantHolders) == 1
			if keeps && (closed != 0 || !a.Stats().Consumer || b.Stats().Consumer) {
				t.Fatalf("A consumes: %v, B consumes: %v, %d sessions closed; want A to keep its one session",
					a.Stats().Consumer, b.Stats().Consumer, closed)
			}
			if !keeps && (a.Stats().Consumer || !b.Stats().Consumer) {
				t.Fatalf("A consumes: %v, B consumes: %v; want B to have taken over", a.Stats().Consumer, b.Stats().Consumer)
			}
			if got := a.Stats().Errors[StageStore]; tt.fault != nil && got == 0 {
				t.Fatal("A counted no store error")
			}
		})
	}
}
