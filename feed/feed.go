// Package feed runs the consumer of the store's change feed. The store
// records every write of a listing, whoever makes it, in the writer's own
// transaction (see upstream.Feed); one gateway at a time holds the feed
// and applies the records: each changed listing's state is read from the
// store and brought to every cache tier, every gateway is told through the
// existing announcement, and the CDN is purged. A record is marked applied
// once the caches have it and done once the CDN acknowledged (or gave up
// on) its purge; a consumer that dies leaves the rest to the next one,
// which redoes it. Applying is idempotent (the caches' revision guard makes
// order and repeats harmless), so at least once is enough.
//
// The gateway's own writes settle their records themselves (cache.Settle)
// when they brought every tier and the CDN up to date; the consumer leaves
// a record alone for Config.Settle after it was made, so that it repeats
// only what a writer did not finish: a writer that died, or one whose
// Redis failed.
//
// Concurrency: a *Consumer is safe for concurrent use; Run is called once.
package feed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/upstream"
)

// Config holds the feed's settings.
type Config struct {
	// Enabled applies the feed. Off, the consumer only marks records done
	// and prunes them, so that the table stays bounded.
	Enabled bool `yaml:"enabled" env:"FEED" help:"apply the store's change feed (writes made by other writers) to every cache tier and the CDN"`
	// Poll is how often the consumer looks for new records.
	Poll time.Duration `yaml:"poll" env:"FEED_POLL" help:"how often the feed's consumer looks for changes"`
	// Batch bounds the records applied at once.
	Batch int `yaml:"batch" env:"FEED_BATCH" help:"changes applied at once, merged per listing"`
	// Retention is how long done records are kept: a Redis that comes back
	// as an older snapshot gets the records of this window again. Zero is
	// the longest a cached copy lives (cache TTL + stale).
	Retention time.Duration `yaml:"retention" env:"FEED_RETENTION" help:"how long applied changes are kept, to replay them to a Redis that lost them; 0 = cache.ttl + cache.stale"`
	// Settle is how long a record is left to the gateway that wrote it.
	Settle time.Duration `yaml:"settle" env:"FEED_SETTLE" help:"a change made through a gateway is left this long to that gateway before the feed applies it"`
}

// DefaultConfig applies the feed, polling every 100 ms.
func DefaultConfig() Config {
	return Config{Enabled: true, Poll: 100 * time.Millisecond, Batch: 500, Settle: 250 * time.Millisecond}
}

// Validate reports every setting out of its range.
func (c Config) Validate() error {
	var errs []error
	if c.Poll <= 0 || c.Settle < 0 {
		errs = append(errs, errors.New("feed.poll must be positive and feed.settle not negative"))
	}
	if c.Batch <= 0 || c.Batch > 10_000 {
		errs = append(errs, errors.New("feed.batch must be within [1, 10000]"))
	}
	if c.Retention < 0 {
		errs = append(errs, errors.New("feed.retention must not be negative"))
	}
	return errors.Join(errs...)
}

// Target is where changes are applied: the listing cache.
type Target interface {
	Apply(ctx context.Context, changes []cache.Change) []error
	RedisIdentity(ctx context.Context) (string, error)
	RedisEmpty(ctx context.Context) (bool, error)
}

// Purger purges the CDN and says when it did. The feed's purges are
// background work: they never wait, and their failures never refuse a
// user's write its own purge.
type Purger interface {
	PurgeBackground(ctx context.Context, hard bool, done func(delivered bool), keys ...string)
}

// Deps are the consumer's collaborators.
type Deps struct {
	Store  upstream.Feed
	Target Target
	// Redis says whether Target has Redis; without it the consumer applies
	// to its own process's tier and adopts no Redis.
	Redis bool
	// Purger is nil without a CDN; Keys names a listing's surrogate keys.
	Purger Purger
	Keys   func(id int64) []string
	// Holder names this gateway to operators; CacheLifetime is the
	// longest a cached copy lives, the default retention.
	Holder        string
	CacheLifetime time.Duration
	Log           *slog.Logger
}

// Error stages, the label of Stats.Errors.
const (
	StageStore    = "store"
	StageRedis    = "redis"
	StageAnnounce = "announce"
	StagePurge    = "purge"
)

// Stats are the consumer's counters and gauges.
type Stats struct {
	// Consumer is whether this gateway holds the feed.
	Consumer bool `json:"consumer"`
	// Backlog and Lag are the records not yet applied and the age of the
	// oldest, by the database's clock, read by the consumer each second.
	Backlog int64         `json:"backlog"`
	Lag     time.Duration `json:"lagNanoseconds"`
	// Applied counts records applied; Replayed those applied again to a
	// new Redis; PurgesGivenUp the records marked done though their purge
	// was given up.
	Applied  uint64 `json:"applied"`
	Replayed uint64 `json:"replayed"`
	// Unpurged counts listings applied without a purge: their first
	// version, which no edge has seen (see firstVersion).
	Unpurged      uint64 `json:"unpurged"`
	PurgesGivenUp uint64 `json:"purgesGivenUp"`
	// Errors counts failures by stage.
	Errors map[string]uint64 `json:"errors"`
}

// Consumer applies the change feed while it holds it.
type Consumer struct {
	cfg  Config
	deps Deps
	log  *slog.Logger

	consumer         atomic.Bool
	backlog, lagNano atomic.Int64
	applied          atomic.Uint64
	replayed         atomic.Uint64
	unpurged         atomic.Uint64
	givenUp          atomic.Uint64
	errors           map[string]*atomic.Uint64
}

// New returns a consumer; Run makes it work.
func New(cfg Config, deps Deps) (*Consumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Store == nil || deps.Target == nil || deps.Log == nil || deps.Holder == "" {
		return nil, errors.New("feed: store, target, log and holder are required")
	}
	if deps.Purger != nil && deps.Keys == nil {
		return nil, errors.New("feed: a purger needs the surrogate keys")
	}
	if cfg.Retention == 0 {
		cfg.Retention = deps.CacheLifetime
	}
	if cfg.Retention <= 0 {
		return nil, errors.New("feed: no retention: set feed.retention or the cache lifetime")
	}
	c := &Consumer{cfg: cfg, deps: deps, log: deps.Log, errors: map[string]*atomic.Uint64{}}
	for _, s := range []string{StageStore, StageRedis, StageAnnounce, StagePurge} {
		c.errors[s] = new(atomic.Uint64)
	}
	return c, nil
}

// Stats returns the counters so far.
func (c *Consumer) Stats() Stats {
	s := Stats{
		Consumer: c.consumer.Load(), Backlog: c.backlog.Load(), Lag: time.Duration(c.lagNano.Load()),
		Applied: c.applied.Load(), Replayed: c.replayed.Load(), Unpurged: c.unpurged.Load(), PurgesGivenUp: c.givenUp.Load(),
		Errors: make(map[string]uint64, len(c.errors)),
	}
	for stage, n := range c.errors {
		s.Errors[stage] = n.Load()
	}
	return s
}

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

// Run holds the feed whenever no other gateway does, and applies it, until
// ctx ends.
func (c *Consumer) Run(ctx context.Context) {
	var notified bool // the store's failure is logged once, not every try
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, acquireTimeout)
		sess, err := c.deps.Store.Acquire(actx, c.deps.Holder)
		cancel()
		wait := acquireEvery
		switch {
		case err == nil:
			notified = false
			if errors.Is(c.hold(ctx, sess), errRedisGone) {
				wait = redisGiveUp // a gateway that reaches Redis may take the feed meanwhile
			}
		case errors.Is(err, upstream.ErrNotConsumer), ctx.Err() != nil:
		case !notified:
			notified = true
			c.errors[StageStore].Add(1)
			c.log.Warn("change feed not acquired", "err", err)
		default:
			c.errors[StageStore].Add(1)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// hold consumes while sess stands, then gives it up, and returns why.
func (c *Consumer) hold(ctx context.Context, sess upstream.FeedSession) error {
	c.consumer.Store(true)
	c.log.Info("change feed consumer started", "holder", c.deps.Holder)
	err := c.consume(ctx, sess)
	c.consumer.Store(false)
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	closeErr := sess.Close(closeCtx)
	if ctx.Err() != nil {
		err = nil
	}
	c.log.Info("change feed consumer stopped", "holder", c.deps.Holder, "err", errors.Join(err, closeErr))
	return err
}

// session wraps the consumer's hold: every call bounded by the lease that
// the last successful one proved.
type session struct {
	upstream.FeedSession
	lastOK time.Time // when the last successful call began
}

// until is how long work may go on before the hold may have lapsed.
func (s *session) until() time.Time { return s.lastOK.Add(s.Lease()) }

// call runs one call on the session, bounded by the lease.
func call[T any](ctx context.Context, s *session, f func(context.Context) (T, error)) (T, error) {
	began := time.Now()
	ctx, cancel := context.WithDeadline(ctx, s.until())
	defer cancel()
	v, err := f(ctx)
	if err == nil {
		s.lastOK = began
	}
	return v, err
}

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

// worker is one hold's state.
type worker struct {
	*Consumer
	s        *session
	purged   chan purged
	mu       sync.Mutex     // guards inflight against the purger's callbacks
	inflight map[int64]bool // records whose purge is under way
}

// purged is a purge's outcome for its records.
type purged struct {
	seqs      []int64
	delivered bool
}

// step applies one batch of pending records and reports whether the batch
// was full. Without an adopted Redis it applies nothing yet.
func (w *worker) step(ctx context.Context, ready bool) (bool, error) {
	if !ready {
		return false, nil
	}
	changes, err := call(ctx, w.s, func(ctx context.Context) ([]upstream.Change, error) {
		return w.s.Pending(ctx, w.cfg.Settle, w.cfg.Batch)
	})
	if err != nil {
		w.errors[StageStore].Add(1)
		return false, err
	}
	if len(changes) == 0 {
		return false, nil
	}
	if !w.cfg.Enabled { // off: the records are only kept bounded
		_, err := call(ctx, w.s, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, w.s.MarkApplied(ctx, seqsOf(changes), true)
		})
		return len(changes) == w.cfg.Batch, err
	}
	return len(changes) == w.cfg.Batch, w.apply(ctx, changes)
}

// listing is one listing's records of a batch, merged.
type listing struct {
	id       int64
	seqs     []int64
	revision int64
	numbers  []cache.Key
	hard     bool // a visibility change or a deletion
	replayed bool // every record is a replay
	created  bool // every record is the listing's creation: see firstVersion
}

// firstVersion reports whether ch records a listing's first version: an
// insert of revision 1, visible before in no form. Any update raises the
// revision above the old one, and a row inserted under the id of a removed
// one continues above its last revision (the triggers see to both), so
// revision 1 is the first row under its id. No edge can hold a copy of it
// that needs a purge: no earlier version of the id existed, an edge never
// stores a 404 (problem answers are no-store, and the shipped VCL stores
// no status of 300 or more), and a number that a removed row left was
// purged under that row's id when it was removed. A bulk import of new
// listings therefore sends the CDN nothing.
func firstVersion(ch upstream.Change) bool {
	return ch.Revision == 1 && !ch.VisibleBefore && !ch.Deleted && !ch.Moved()
}

func merge(changes []upstream.Change) []*listing {
	byID := map[int64]*listing{}
	var order []*listing
	for _, ch := range changes {
		l := byID[ch.ListingID]
		if l == nil {
			l = &listing{id: ch.ListingID, replayed: true, created: true}
			byID[ch.ListingID] = l
			order = append(order, l)
		}
		l.seqs = append(l.seqs, ch.Seq)
		l.revision = max(l.revision, ch.Revision)
		for _, k := range []cache.Key{cache.ByNumber(ch.FirmID, ch.No), cache.ByNumber(ch.OldFirmID, ch.OldNo)} {
			if k.FirmID > 0 && !slices.Contains(l.numbers, k) {
				l.numbers = append(l.numbers, k)
			}
		}
		l.hard = l.hard || ch.Deleted || ch.VisibleBefore != ch.VisibleAfter
		l.replayed = l.replayed && ch.Replayed
		l.created = l.created && firstVersion(ch)
	}
	return order
}

// apply brings a batch to every tier and gateway, marks what was applied,
// and queues the purges.
func (w *worker) apply(ctx context.Context, changes []upstream.Change) error {
	ls := merge(changes)
	ids := make([]int64, len(ls))
	for i, l := range ls {
		ids[i] = l.id
	}
	states, err := call(ctx, w.s, func(ctx context.Context) (map[int64]upstream.ListingState, error) {
		return w.s.Listings(ctx, ids)
	})
	if err != nil {
		w.errors[StageStore].Add(1)
		return err
	}
	batch := make([]cache.Change, len(ls))
	for i, l := range ls {
		batch[i] = cache.Change{State: states[l.id], Revision: l.revision, Numbers: l.numbers}
	}
	actx, cancel := context.WithDeadline(ctx, w.s.until())
	errs := w.deps.Target.Apply(actx, batch)
	cancel()
	var applied, done []int64
	var purges []*listing
	failed := 0
	for i, l := range ls {
		if errs[i] != nil {
			stage := StageRedis
			if errors.Is(errs[i], cache.ErrNotAnnounced) {
				stage = StageAnnounce
			}
			w.errors[stage].Add(1)
			failed++
			continue
		}
		if l.replayed || l.created || w.deps.Purger == nil {
			if l.created && !l.replayed && w.deps.Purger != nil {
				w.unpurged.Add(1)
			}
			done = append(done, l.seqs...)
			continue
		}
		applied = append(applied, l.seqs...)
		purges = append(purges, l)
	}
	if err := w.mark(ctx, done, true); err != nil {
		return err
	}
	if err := w.mark(ctx, applied, false); err != nil {
		return err
	}
	for _, l := range purges {
		w.purge(ctx, l.hard, l.id, l.seqs)
	}
	if failed > 0 {
		w.log.Debug("changes not applied; retried at the next poll", "listings", failed, "err", errors.Join(errs...))
	}
	return nil
}

func (w *worker) mark(ctx context.Context, seqs []int64, done bool) error {
	if len(seqs) == 0 {
		return nil
	}
	_, err := call(ctx, w.s, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, w.s.MarkApplied(ctx, seqs, done)
	})
	if err != nil {
		w.errors[StageStore].Add(1)
		return err
	}
	w.applied.Add(uint64(len(seqs)))
	return nil
}

// purge asks the CDN to drop a listing's copies; the records are marked
// done when it did, or gave up.
func (w *worker) purge(ctx context.Context, hard bool, id int64, seqs []int64) {
	w.mu.Lock()
	for _, seq := range seqs {
		w.inflight[seq] = true
	}
	w.mu.Unlock()
	w.deps.Purger.PurgeBackground(ctx, hard, func(delivered bool) {
		select {
		case w.purged <- purged{seqs: seqs, delivered: delivered}:
		default: // the orphan scan purges them again
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, seq := range seqs {
				delete(w.inflight, seq)
			}
		}
	}, w.deps.Keys(id)...)
}

// idle reports whether no purge is under way or waits to be marked.
func (w *worker) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.inflight) == 0 && len(w.purged) == 0
}

// collectPurged marks done the records whose purges ended.
func (w *worker) collectPurged(ctx context.Context) {
	var seqs []int64
	for {
		select {
		case p := <-w.purged:
			seqs = append(seqs, p.seqs...)
			if !p.delivered {
				w.givenUp.Add(uint64(len(p.seqs)))
				w.errors[StagePurge].Add(1)
			}
			continue
		default:
		}
		break
	}
	if len(seqs) == 0 {
		return
	}
	_, err := call(ctx, w.s, func(ctx context.Context) (struct{}, error) { return struct{}{}, w.s.MarkDone(ctx, seqs) })
	if err != nil {
		w.errors[StageStore].Add(1) // the orphan scan purges them again
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, seq := range seqs {
		delete(w.inflight, seq)
	}
}

// repurge purges again the records applied at least after ago whose
// purge is not under way here: their consumer died before the CDN
// acknowledged.
func (w *worker) repurge(ctx context.Context, after time.Duration) error {
	if w.deps.Purger == nil {
		return nil
	}
	changes, err := call(ctx, w.s, func(ctx context.Context) ([]upstream.Change, error) {
		return w.s.Unpurged(ctx, after, w.cfg.Batch)
	})
	if err != nil {
		w.errors[StageStore].Add(1)
		return err
	}
	w.mu.Lock()
	changes = slices.DeleteFunc(changes, func(ch upstream.Change) bool { return w.inflight[ch.Seq] })
	w.mu.Unlock()
	for _, l := range merge(changes) {
		w.purge(ctx, l.hard, l.id, l.seqs)
	}
	return nil
}

func seqsOf(changes []upstream.Change) []int64 {
	out := make([]int64, len(changes))
	for i, ch := range changes {
		out[i] = ch.Seq
	}
	return out
}

// backfillBatch is how many listings one idle poll gives a body.
const backfillBatch = 200

// backfill keeps the response body of the next listings after id after
// that lack a current one (written before bodies were kept, or by another
// writer whose change was applied before), so that their misses do no
// JSON work. It returns where to go on, -1 once none is left.
func (w *worker) backfill(ctx context.Context, after int64) (int64, error) {
	ids, err := call(ctx, w.s, func(ctx context.Context) ([]int64, error) { return w.s.StaleBodies(ctx, after, backfillBatch) })
	if err == nil && len(ids) > 0 {
		_, err = call(ctx, w.s, func(ctx context.Context) (map[int64]upstream.ListingState, error) { return w.s.Listings(ctx, ids) })
	}
	if err != nil {
		w.errors[StageStore].Add(1)
		return after, err
	}
	if len(ids) < backfillBatch {
		w.log.Debug("listing bodies kept", "upTo", after)
		return -1, nil
	}
	return ids[len(ids)-1], nil
}
