package feed

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

// countingFeed counts its sessions' calls.
type countingFeed struct {
	upstream.Feed
	waits, others atomic.Int64
	idle          atomic.Int64 // waits that found nothing to do
}

func (f *countingFeed) Acquire(ctx context.Context, holder string) (upstream.FeedSession, error) {
	sess, err := f.Feed.Acquire(ctx, holder)
	if err != nil {
		return nil, err
	}
	return &countingSession{FeedSession: sess, feed: f}, nil
}

type countingSession struct {
	upstream.FeedSession
	feed *countingFeed
}

func (s *countingSession) AwaitUndone(ctx context.Context, wait time.Duration) (bool, error) {
	s.feed.waits.Add(1)
	undone, err := s.FeedSession.AwaitUndone(ctx, wait)
	if err == nil && !undone {
		s.feed.idle.Add(1)
	}
	return undone, err
}

func (s *countingSession) Pending(ctx context.Context, settle time.Duration, limit int) ([]upstream.Change, error) {
	s.feed.others.Add(1)
	return s.FeedSession.Pending(ctx, settle, limit)
}

func (s *countingSession) Renew(ctx context.Context) error {
	s.feed.others.Add(1)
	return s.FeedSession.Renew(ctx)
}

func (s *countingSession) Backlog(ctx context.Context) (int64, time.Duration, error) {
	s.feed.others.Add(1)
	return s.FeedSession.Backlog(ctx)
}

// TestIdleConsumerWaitsInTheStore: an idle consumer waits in the store,
// about once a second, instead of asking every poll; another writer's
// change still ends the wait and is applied.
func TestIdleConsumerWaitsInTheStore(t *testing.T) {
	f := newFixture(t)
	counted := &countingFeed{Feed: f.store}
	c, err := New(DefaultConfig(), Deps{Store: counted, Target: f.cache, Holder: t.Name(), CacheLifetime: time.Hour,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.Run(ctx) })
	t.Cleanup(func() { stop(); wg.Wait() })
	waitLong(t, func() bool { return counted.idle.Load() > 0 }) // the records of the fixture are done
	waits, others := counted.waits.Load(), counted.others.Load()
	time.Sleep(2500 * time.Millisecond)
	waits, others = counted.waits.Load()-waits, counted.others.Load()-others
	if waits > 4 || others > 0 {
		t.Fatalf("idle for 2.5 s: %d waits, %d other calls; want about one wait a second (%v) and nothing else", waits, others, idleWait)
	}
	if !strings.Contains(f.title(t), `"title":"v1"`) {
		t.Fatal("not cached")
	}
	written := time.Now()
	if _, err := f.raw.Exec(`UPDATE listings SET document = replace(document, '"title":"v1"', '"title":"v2"') WHERE id = ?`, f.listing.ID); err != nil {
		t.Fatal(err)
	}
	waitLong(t, func() bool { return strings.Contains(f.title(t), `"title":"v2"`) })
	t.Logf("another writer's change applied %v after its commit, on an idle consumer (settle %v)",
		time.Since(written).Round(time.Millisecond), DefaultConfig().Settle)
}
