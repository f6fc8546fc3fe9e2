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
	"log/slog"
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
	Apply(ctx context.Context, changes []cache.Update) []error
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
