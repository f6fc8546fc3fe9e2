package feed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

// Timings of the consumer's loop.
const (
	acquireEvery   = 500 * time.Millisecond // how often a gateway tries to become the consumer
	acquireTimeout = 5 * time.Second        // bounds one try, on a store that does not answer
	backlogEvery   = time.Second            // how often the backlog gauges are read
	pruneEvery     = 30 * time.Second       // how often done records are pruned
	// adoptEvery is how often an idle consumer checks that Redis is the
	// one adopted (a busy one checks at every poll).
	adoptEvery = time.Second
	pruneBatch = 10_000
	// redisGiveUp is how long a consumer that cannot reach Redis keeps the
	// feed before it leaves it to a gateway that may.
	redisGiveUp = 5 * time.Second
	// orphanAfter is how long a record may wait applied but not done
	// before it is purged again: its purge was lost with a consumer.
	orphanAfter = time.Minute
)

// consume applies the feed until the hold is lost or ctx ends.
func (c *Consumer) consume(ctx context.Context, fs upstream.FeedSession) error {
	s := &session{FeedSession: fs, lastOK: time.Now()}
	w := &worker{Consumer: c, s: s, purged: make(chan purged, 1024), inflight: map[int64]bool{}}
	var adopted string
	if !c.deps.Redis { // no Redis: the marks refer to this process's tier
		if _, err := call(ctx, s, func(ctx context.Context) (int64, error) { return s.Adopt(ctx, "", c.cfg.Retention) }); err != nil {
			c.errors[StageStore].Add(1)
			return err
		}
	}
	lastBacklog, lastPrune, lastOrphans, lastAdopt := time.Time{}, time.Now(), time.Time{}, time.Time{}
	var redisDownSince time.Time
	var backfillAfter int64 // -1 once every listing's body is kept
	quiet := false          // the last round left nothing to do
	for ctx.Err() == nil {
		now := time.Now()
		adoptDue := c.deps.Redis && c.cfg.Enabled && now.Sub(lastAdopt) >= adoptEvery
		if quiet && !adoptDue && now.Sub(lastPrune) < pruneEvery {
			// Idle: one read of an empty index says whether anything
			// is to do, and proves the hold; nothing is written. It is
			// asked every Settle, not every Poll, where Settle is the
			// longer: a change another writer makes is left to it for
			// Settle anyway, so it is applied as soon as before.
			undone, err := call(ctx, s, func(ctx context.Context) (bool, error) { return s.Undone(ctx) })
			if err != nil {
				c.errors[StageStore].Add(1)
				return err
			}
			if !undone && w.idle() {
				c.backlog.Store(0)
				c.lagNano.Store(0)
				select {
				case <-ctx.Done():
				case <-time.After(min(max(c.cfg.Poll, c.cfg.Settle), s.Lease()/4)):
				}
				continue
			}
		}
		if c.deps.Redis && c.cfg.Enabled {
			lastAdopt = now
			id, err := c.adopt(ctx, s, adopted)
			switch {
			case err == nil:
				adopted, redisDownSince = id, time.Time{}
			case errors.Is(err, errStore):
				return err
			case redisDownSince.IsZero():
				redisDownSince = now
			case now.Sub(redisDownSince) > redisGiveUp:
				return fmt.Errorf("%w: %w", errRedisGone, err)
			}
		}
		w.collectPurged(ctx)
		if c.cfg.Enabled && now.Sub(lastOrphans) > orphanAfter/2 {
			after := orphanAfter
			if lastOrphans.IsZero() {
				after = 0 // just taken over: every unfinished purge is an orphan
			}
			if err := w.repurge(ctx, after); err != nil {
				return err
			}
			lastOrphans = now
		}
		full, err := w.step(ctx, adopted != "" || !c.deps.Redis || !c.cfg.Enabled)
		if err != nil {
			return err
		}
		if !full && backfillAfter >= 0 {
			if backfillAfter, err = w.backfill(ctx, backfillAfter); err != nil {
				return err
			}
		}
		if now.Sub(lastBacklog) >= backlogEvery {
			if err := c.readBacklog(ctx, s); err != nil {
				return err
			}
			lastBacklog = now
		}
		if now.Sub(lastPrune) >= pruneEvery {
			if _, err := call(ctx, s, func(ctx context.Context) (int64, error) {
				return s.Prune(ctx, c.cfg.Retention, pruneBatch)
			}); err != nil {
				c.errors[StageStore].Add(1)
				return err
			}
			lastPrune = now
		}
		if full {
			continue // a burst: go on at once
		}
		quiet = backfillAfter < 0 && w.idle()
		select {
		case <-ctx.Done():
		case <-time.After(min(c.cfg.Poll, s.Lease()/4)):
		}
		if _, err := call(ctx, s, func(ctx context.Context) (struct{}, error) { return struct{}{}, s.Renew(ctx) }); err != nil {
			c.errors[StageStore].Add(1)
			return err
		}
	}
	return ctx.Err()
}

var (
	// errStore marks a failure of the store's side in adopt.
	errStore = errors.New("feed store")
	// errRedisGone ends a hold whose Redis has not answered for redisGiveUp.
	errRedisGone = fmt.Errorf("redis unreachable for %v", redisGiveUp)
)

// adopt makes the feed's marks refer to the Redis that answers now,
// replaying the retention window to a Redis that is new and not empty.
func (c *Consumer) adopt(ctx context.Context, s *session, adopted string) (string, error) {
	id, err := c.deps.Target.RedisIdentity(ctx)
	if err != nil {
		c.errors[StageRedis].Add(1)
		return "", err
	}
	if id == adopted {
		return id, nil
	}
	replay := c.cfg.Retention
	if empty, err := c.deps.Target.RedisEmpty(ctx); err != nil {
		c.errors[StageRedis].Add(1)
		return "", err
	} else if empty {
		replay = 0 // it holds nothing old
	}
	n, err := call(ctx, s, func(ctx context.Context) (int64, error) { return s.Adopt(ctx, id, replay) })
	if err != nil {
		c.errors[StageStore].Add(1)
		return "", errors.Join(errStore, err)
	}
	if n > 0 {
		c.replayed.Add(uint64(n))
		c.log.Warn("redis changed; replaying the retained changes to it", "changes", n, "window", replay.String())
	} else if adopted != "" {
		c.log.Info("redis changed; nothing to replay", "empty", replay == 0)
	}
	return id, nil
}

func (c *Consumer) readBacklog(ctx context.Context, s *session) error {
	type backlog struct {
		rows int64
		lag  time.Duration
	}
	b, err := call(ctx, s, func(ctx context.Context) (backlog, error) {
		rows, lag, err := s.Backlog(ctx)
		return backlog{rows, lag}, err
	})
	if err != nil {
		c.errors[StageStore].Add(1)
		return err
	}
	c.backlog.Store(b.rows)
	c.lagNano.Store(int64(b.lag))
	return nil
}
