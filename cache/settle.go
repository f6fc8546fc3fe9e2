package cache

import (
	"context"
	"log/slog"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

// settler marks this gateway's own writes done in the store's change feed,
// off the request path: a write that brought every tier, every gateway and
// the CDN up to date itself leaves nothing for the feed's consumer, which
// would otherwise announce and purge it a second time. Writes queued
// together are settled in one statement. A settle that is lost (a full
// queue, a failing store, this process dying) only costs that second time.
type settler struct {
	feed    FeedView
	timeout time.Duration
	queue   chan settling
	log     *slog.Logger
}

type settling struct {
	identity string
	version  upstream.Settled
}

func newSettler(feed FeedView, timeout time.Duration, log *slog.Logger) *settler {
	return &settler{feed: feed, timeout: max(timeout, time.Second), queue: make(chan settling, 4096), log: log}
}

// add queues a settle without waiting.
func (s *settler) add(identity string, v upstream.Settled) {
	select {
	case s.queue <- settling{identity: identity, version: v}:
	default:
	}
}

// run settles what is queued until ctx ends.
func (s *settler) run(ctx context.Context) {
	for {
		var first settling
		select {
		case <-ctx.Done():
			return
		case first = <-s.queue:
		}
		batch := map[string][]upstream.Settled{first.identity: {first.version}}
	drain:
		for n := 1; n < 256; n++ {
			select {
			case next := <-s.queue:
				batch[next.identity] = append(batch[next.identity], next.version)
			default:
				break drain
			}
		}
		for identity, versions := range batch {
			sctx, cancel := context.WithTimeout(ctx, s.timeout)
			if err := s.feed.Settle(sctx, identity, versions); err != nil {
				s.log.Debug("writes not settled; the change feed applies them", "writes", len(versions), "err", err)
			}
			cancel()
		}
	}
}

// UnpublishedWait bounds how long a write that could not publish itself
// (Redis failed it, or was not trusted when it began) waits for the change
// feed's consumer to apply it.
const UnpublishedWait = 2 * time.Second

// awaitFeed returns once the change feed has applied these versions, or
// after UnpublishedWait. Until then Redis may hold the versions they
// replaced, and a gateway that trusts Redis (it saw no fault, and verified
// the feed before this write was recorded) would serve them: a write must
// not return while that can happen.
func (c *Cache) awaitFeed(ctx context.Context, ls ...upstream.Listing) {
	if c.trust == nil || len(ls) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, UnpublishedWait)
	defer cancel()
	for _, l := range ls {
		for {
			applied, err := feedCall(ctx, c.loadTimeout, func(ctx context.Context) (bool, error) {
				return c.trust.feed.Applied(ctx, l.ID, l.Revision)
			})
			if err == nil && applied {
				break
			}
			select {
			case <-ctx.Done():
				c.log.WarnContext(ctx, "write returned before the change feed applied it",
					"listing", l.ID, "revision", l.Revision, "wait", UnpublishedWait.String())
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

// Settle tells the change feed that these writes were brought to every
// tier, every gateway and (the caller has seen to it) the CDN, so that its
// consumer does not do it again. Writes that were not published in full
// are left to the consumer. It does not block.
func (c *Cache) Settle(ws ...Written) {
	if c.settler == nil {
		return
	}
	for _, w := range ws {
		if w.published {
			c.settler.add(w.identity, upstream.Settled{ID: w.Listing.ID, Revision: w.Listing.Revision})
		}
	}
}
