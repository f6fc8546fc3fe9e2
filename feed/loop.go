package feed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

// Timings of the consumer: every period and bound of the feed but the
// configured ones (Config's Poll, Settle and Retention), in one place.
const (
	acquireEvery   = 500 * time.Millisecond // how often a gateway tries to become the consumer
	acquireTimeout = 5 * time.Second        // bounds one try, on a store that does not answer
	backlogEvery   = time.Second            // how often the backlog gauges are read
	pruneEvery     = 30 * time.Second       // how often done records are pruned
	// adoptEvery is how often an idle consumer checks that Redis is the
	// one adopted (a busy one checks at every poll).
	adoptEvery = time.Second
	// idleWait is the longest an idle consumer waits in the store for a
	// record: it then checks Redis, and waits again.
	idleWait   = adoptEvery
	pruneBatch = 10_000
	// redisGiveUp is how long a consumer that cannot reach Redis keeps the
	// feed before it leaves it to a gateway that may.
	redisGiveUp = 5 * time.Second
	// orphanAfter is how long a record may wait applied but not done
	// before it is purged again: its purge was lost with a consumer.
	orphanAfter = time.Minute
	// Retries of a failed call on the session: the first waits retryFirst,
	// each next one twice as long, at most retryMost (and a quarter lease).
	retryFirst = 20 * time.Millisecond
	retryMost  = time.Second
	// closeTimeout bounds giving the feed up.
	closeTimeout = time.Second
)

// consume applies the feed until the hold is lost or ctx ends.
func (c *Consumer) consume(ctx context.Context, fs upstream.FeedSession) error {
	l, err := c.startLoop(ctx, fs)
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		if err := l.round(ctx); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// loop is the consuming loop over one hold: when each periodic duty last
// ran, and what the duties carry from one round to the next.
type loop struct {
	*Consumer
	s *session

	purged   chan purged    // the purger's answers
	mu       sync.Mutex     // guards inflight against the purger's callbacks
	inflight map[int64]bool // records whose purge is under way

	adopted        string    // the Redis the marks refer to; "" before one is adopted
	redisDownSince time.Time // when Redis stopped answering; zero while it answers
	backfillAfter  int64     // where the backfill goes on; -1 once every listing's body is kept
	quiet          bool      // the last round left nothing to do

	// The periodic duties. Redis's check runs every round while busy, and
	// every adoptEvery while idle; the first prune waits pruneEvery.
	adoptCheck, orphans, gauges, prune duty
}

// duty is a periodic duty of the loop: due every period since it last
// ran, and at once where it has not run yet.
type duty struct {
	every time.Duration
	last  time.Time
}

// due reports whether the duty is due at now.
func (d *duty) due(now time.Time) bool { return d.last.IsZero() || now.Sub(d.last) >= d.every }

// done records that the duty ran at now.
func (d *duty) done(now time.Time) { d.last = now }

// startLoop starts the loop on fs. Without Redis the marks refer to this
// process's tier, adopted at once.
func (c *Consumer) startLoop(ctx context.Context, fs upstream.FeedSession) (*loop, error) {
	s := newSession(c, fs)
	now := time.Now()
	l := &loop{Consumer: c, s: s, purged: make(chan purged, 1024), inflight: map[int64]bool{},
		adoptCheck: duty{every: adoptEvery}, orphans: duty{every: orphanAfter / 2}, gauges: duty{every: backlogEvery},
		prune: duty{every: pruneEvery, last: now}}
	if !c.deps.Redis {
		if _, err := call(ctx, s, func(ctx context.Context) (int64, error) { return s.Adopt(ctx, "", c.cfg.Retention) }); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// round runs the consumer's duties once, in this order, each at its
// period:
//
//	rest             after a quiet round, unless a prune is due: Redis's check when due, then a wait
//	                 of up to idleWait for undone records; ends the round when none came
//	adopt Redis      every round (every adoptEvery while idle)
//	collect purges   every round
//	repurge orphans  every orphanAfter/2, at once after a takeover
//	step             every round: one batch
//	backfill         after a batch that was not full, until every body is kept
//	gauges           every backlogEvery
//	prune            every pruneEvery
//	burst            after a full batch: the next round at once
//	poll sleep       Poll, at most a quarter of the lease
//	renew            after the sleep
func (l *loop) round(ctx context.Context) error {
	now := time.Now()
	checked := false // Redis's check ran in this round
	if l.mayRest(now) {
		var rested bool
		var err error
		if rested, checked, err = l.rest(ctx, now); err != nil || rested {
			return err
		}
	}
	if !checked {
		if err := l.adoptRedis(ctx, now); err != nil {
			return err
		}
	}
	l.collectPurged(ctx)
	if err := l.repurgeOrphans(ctx, now); err != nil {
		return err
	}
	full, err := l.step(ctx, l.ready())
	if err != nil {
		return err
	}
	if !full {
		if err := l.backfillBodies(ctx); err != nil {
			return err
		}
	}
	if err := l.readGauges(ctx, now); err != nil {
		return err
	}
	if err := l.pruneRecords(ctx, now); err != nil {
		return err
	}
	if full {
		return nil // a burst: go on at once
	}
	l.quiet = l.backfillAfter < 0 && l.idle()
	sleep(ctx, min(l.cfg.Poll, l.s.Lease()/4))
	return l.renew(ctx)
}

// adoptsRedis reports whether the loop adopts the Redis it applies to.
func (l *loop) adoptsRedis() bool { return l.deps.Redis && l.cfg.Enabled }

// mayRest reports whether the round may be a rest: the last round
// was quiet, and no prune is due.
func (l *loop) mayRest(now time.Time) bool {
	return l.quiet && !l.prune.due(now)
}

// rest is the idle round: Redis's check when it is due, then a wait
// in the store (AwaitUndone) until a record is not done, for up to
// idleWait (a quarter lease at most). It writes nothing and proves the
// hold. With nothing to do it zeroes the gauges and reports rested; it
// reports checked where it ran Redis's check. A record another writer
// makes ends the wait at once; it is applied after Settle, as before.
func (l *loop) rest(ctx context.Context, now time.Time) (rested, checked bool, err error) {
	if l.adoptsRedis() && l.adoptCheck.due(now) {
		adopted := l.adopted
		if err := l.adoptRedis(ctx, now); err != nil || l.adopted != adopted || !l.redisDownSince.IsZero() {
			return false, true, err // a new Redis, or none: a full round
		}
		checked = true
	}
	wait := min(idleWait, l.s.Lease()/4)
	undone, err := call(ctx, l.s, func(ctx context.Context) (bool, error) { return l.s.AwaitUndone(ctx, wait) })
	if err != nil || undone || !l.idle() {
		return false, checked, err
	}
	l.backlog.Store(0)
	l.lagNano.Store(0)
	return true, checked, nil
}

// adoptRedis has the marks refer to the Redis that answers now. It ends
// the hold on the store's failure, or once Redis has not answered for
// redisGiveUp.
func (l *loop) adoptRedis(ctx context.Context, now time.Time) error {
	if !l.adoptsRedis() {
		return nil
	}
	l.adoptCheck.done(now)
	id, err := l.adopt(ctx, l.s, l.adopted)
	switch {
	case err == nil:
		l.adopted, l.redisDownSince = id, time.Time{}
	case errors.Is(err, errStore):
		return err
	case l.redisDownSince.IsZero():
		l.redisDownSince = now
	case now.Sub(l.redisDownSince) > redisGiveUp:
		return fmt.Errorf("%w: %w", errRedisGone, err)
	}
	return nil
}

// repurgeOrphans purges again the records whose purge a dead consumer
// left unfinished.
func (l *loop) repurgeOrphans(ctx context.Context, now time.Time) error {
	if !l.cfg.Enabled || !l.orphans.due(now) {
		return nil
	}
	after := orphanAfter
	if l.orphans.last.IsZero() {
		after = 0 // just taken over: every unfinished purge is an orphan
	}
	if err := l.repurge(ctx, after); err != nil {
		return err
	}
	l.orphans.done(now)
	return nil
}

// ready reports whether step may apply: the Redis it applies to, if any,
// is adopted.
func (l *loop) ready() bool { return l.adopted != "" || !l.adoptsRedis() }

// backfillBodies keeps the bodies of the next listings that lack one,
// until none is left.
func (l *loop) backfillBodies(ctx context.Context) error {
	if l.backfillAfter < 0 {
		return nil
	}
	var err error
	l.backfillAfter, err = l.backfill(ctx, l.backfillAfter)
	return err
}

// readGauges reads the backlog gauges when they are due.
func (l *loop) readGauges(ctx context.Context, now time.Time) error {
	if !l.gauges.due(now) {
		return nil
	}
	if err := l.readBacklog(ctx, l.s); err != nil {
		return err
	}
	l.gauges.done(now)
	return nil
}

// pruneRecords drops done records past the retention when a prune is due.
func (l *loop) pruneRecords(ctx context.Context, now time.Time) error {
	if !l.prune.due(now) {
		return nil
	}
	if _, err := call(ctx, l.s, func(ctx context.Context) (int64, error) {
		return l.s.Prune(ctx, l.cfg.Retention, pruneBatch)
	}); err != nil {
		return err
	}
	l.prune.done(now)
	return nil
}

// renew proves the hold after the poll's sleep.
func (l *loop) renew(ctx context.Context) error {
	_, err := call(ctx, l.s, func(ctx context.Context) (struct{}, error) { return struct{}{}, l.s.Renew(ctx) })
	return err
}

// sleep waits for d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
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
	var (
		id    string
		empty bool
		err   error
	)
	s.outside(ctx, func(ctx context.Context) { id, err = c.deps.Target.RedisIdentity(ctx) })
	if err != nil {
		c.errors[StageRedis].Add(1)
		return "", err
	}
	if id == adopted {
		return id, nil
	}
	s.outside(ctx, func(ctx context.Context) { empty, err = c.deps.Target.RedisEmpty(ctx) })
	if err != nil {
		c.errors[StageRedis].Add(1)
		return "", err
	}
	replay := c.cfg.Retention
	if empty {
		replay = 0 // it holds nothing old
	}
	n, err := call(ctx, s, func(ctx context.Context) (int64, error) { return s.Adopt(ctx, id, replay) })
	if err != nil {
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
		return err
	}
	c.backlog.Store(b.rows)
	c.lagNano.Store(int64(b.lag))
	return nil
}
