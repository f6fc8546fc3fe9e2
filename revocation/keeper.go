package revocation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/upstream"
)

// Config holds the revocations' settings.
type Config struct {
	// Poll is how often a gateway reads the revocations from the store: the
	// bound on learning of one while Redis is down.
	Poll time.Duration `yaml:"poll" env:"REVOCATION_POLL" help:"how often the revocations are read from the store: the bound on applying one while Redis is down"`
}

// DefaultConfig polls every 2 s.
func DefaultConfig() Config {
	return Config{Poll: 2 * time.Second}
}

// Validate reports a setting out of its range.
func (c Config) Validate() error {
	if c.Poll <= 0 {
		return errors.New("revocation.poll must be positive")
	}
	return nil
}

// Deps are a Keeper's collaborators and what it takes from other parts'
// settings.
type Deps struct {
	// Set is filled from Source and, when Redis is set, from Redis.
	Set    *Set
	Source Source
	Redis  redis.UniversalClient // nil: the store alone
	// Prefix is the gateway's Redis key prefix.
	Prefix string
	// Horizon is the longest a token lives: its lifetime plus the leeway.
	Horizon time.Duration
	// StoreTimeout and RedisTimeout bound each call.
	StoreTimeout time.Duration
	RedisTimeout time.Duration
	Log          *slog.Logger
}

// validate reports every value out of its range.
func (d Deps) validate() error {
	var errs []error
	if d.Set == nil || d.Source == nil || d.Log == nil {
		errs = append(errs, errors.New("revocation keeper: set, source and log are required"))
	}
	if d.Horizon <= 0 || d.StoreTimeout <= 0 {
		errs = append(errs, errors.New("revocation keeper: horizon and store timeout must be positive"))
	}
	if d.Redis != nil && d.RedisTimeout <= 0 {
		errs = append(errs, errors.New("revocation keeper: redis timeout must be positive"))
	}
	return errors.Join(errs...)
}

// Source is the store's side of revocations.
type Source interface {
	Revocations(ctx context.Context, since time.Time) ([]upstream.Revocation, error)
	PruneRevocations(ctx context.Context, before time.Time) (int64, error)
}

// Channel is the Redis channel of the announcements under a key prefix.
func Channel(prefix string) string { return prefix + "token:revocations" }

// Announce publishes r on the channel of every gateway with this Redis key
// prefix and returns how many received it (in a Redis Cluster, how many of
// the node that ran it). The store must hold r first: a gateway that
// misses the announcement reads it there.
func Announce(ctx context.Context, rdb redis.UniversalClient, prefix string, r upstream.Revocation) (int64, error) {
	n, err := rdb.Publish(ctx, Channel(prefix), encode(r)).Result()
	if err != nil {
		return 0, fmt.Errorf("announce revocation: %w", err)
	}
	return n, nil
}

// encode writes "v1 <firm> <user> <milliseconds>".
func encode(r upstream.Revocation) string {
	return "v1 " + strconv.FormatInt(r.FirmID, 10) + " " + strconv.FormatInt(r.UserID, 10) + " " + strconv.FormatInt(r.At.UnixMilli(), 10)
}

func decode(s string) (upstream.Revocation, error) {
	f := strings.Fields(s)
	if len(f) != 4 || f[0] != "v1" {
		return upstream.Revocation{}, fmt.Errorf("revocation announcement %.40q", s)
	}
	var n [3]int64
	for i, p := range f[1:] {
		v, err := strconv.ParseInt(p, 10, 64)
		if err != nil {
			return upstream.Revocation{}, fmt.Errorf("revocation announcement %.40q", s)
		}
		n[i] = v
	}
	if n[0] <= 0 || n[1] < 0 {
		return upstream.Revocation{}, fmt.Errorf("revocation announcement %.40q", s)
	}
	return upstream.Revocation{FirmID: n[0], UserID: n[1], At: time.UnixMilli(n[2])}, nil
}

// Keeper fills a Set: it loads the revocations in force at start, then
// polls the store every Config.Poll, and, with Redis, applies the
// announcements as they come and reads the store again whenever its
// subscription is (re)confirmed, since announcements made while it was
// down are lost. It prunes the store's expired revocations at start and
// every pruneEvery.
type Keeper struct {
	cfg  Config
	deps Deps // Redis nil: the store alone
	now  func() time.Time
	// reload asks the poller to read the store now.
	reload chan struct{}
	// pingEvery and pongWithin are the constants below; tests shorten them.
	pingEvery, pongWithin time.Duration

	pollFailures, announced atomic.Uint64
	subscribed              atomic.Bool
}

// pruneEvery is how often a gateway prunes the store's expired
// revocations; every gateway does, and a prune is idempotent.
const pruneEvery = 10 * time.Minute

// pingEvery is how long a subscription may be quiet before it is pinged;
// one whose ping is not answered within pongWithin is taken as lost
// (about 32 s after it fell silent). The store's poll bounds a
// revocation's delay meanwhile, so the ping only finds a lost
// subscription before the next announcement is missed.
const (
	pongWithin = 2 * time.Second
	pingEvery  = 30 * time.Second
)

// NewKeeper returns a Keeper of deps.Set that reads deps.Source and, when
// deps.Redis is not nil, listens on Redis.
func NewKeeper(cfg Config, deps Deps) (*Keeper, error) {
	if err := errors.Join(cfg.Validate(), deps.validate()); err != nil {
		return nil, err
	}
	return &Keeper{cfg: cfg, deps: deps, now: time.Now,
		reload: make(chan struct{}, 1), pingEvery: pingEvery, pongWithin: pongWithin}, nil
}

// Stats are a Keeper's counters.
type Stats struct {
	// InForce is how many revocations the Set holds.
	InForce int `json:"inForce"`
	// PollFailures counts reads of the store that failed.
	PollFailures uint64 `json:"pollFailures"`
	// Announced counts announcements received.
	Announced uint64 `json:"announced"`
	// Subscribed is true while the announcements' subscription is live.
	Subscribed bool `json:"subscribed"`
}

// Stats reads the counters.
func (k *Keeper) Stats() Stats {
	return Stats{InForce: k.deps.Set.Len(), PollFailures: k.pollFailures.Load(), Announced: k.announced.Load(), Subscribed: k.subscribed.Load()}
}

// Load prunes the store's expired revocations and puts the rest in force.
// A gateway calls it before it serves, so that a token revoked before it
// started is refused from its first request.
func (k *Keeper) Load(ctx context.Context) error {
	if err := k.prune(ctx); err != nil {
		return err
	}
	if err := k.poll(ctx); err != nil {
		return fmt.Errorf("load revocations: %w", err)
	}
	return nil
}

// Run keeps the Set up to date until ctx ends, and returns once its
// subscription is closed too.
func (k *Keeper) Run(ctx context.Context) {
	if k.deps.Redis != nil {
		var listening sync.WaitGroup
		defer listening.Wait()
		listening.Go(func() { k.listen(ctx) })
	}
	tick := time.NewTicker(k.cfg.Poll)
	defer tick.Stop()
	lastPrune := k.now()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-k.reload:
		}
		err := k.poll(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			k.pollFailures.Add(1)
			if !failing { // the transition is logged, not every poll
				k.deps.Log.Warn("revocations not read from the store; new ones arrive only through Redis", "err", err)
			}
		case failing:
			k.deps.Log.Info("revocations read from the store again")
		}
		failing = err != nil
		if !failing && k.now().Sub(lastPrune) >= pruneEvery {
			lastPrune = k.now()
			if err := k.prune(ctx); err != nil {
				k.deps.Log.Warn("expired revocations not pruned", "err", err)
			}
		}
	}
}

// poll reads the revocations in force and drops the expired ones.
func (k *Keeper) poll(ctx context.Context) error {
	since := k.now().Add(-k.deps.Horizon)
	ctx, cancel := context.WithTimeout(ctx, k.deps.StoreTimeout)
	defer cancel()
	rs, err := k.deps.Source.Revocations(ctx, since)
	if err != nil {
		return err
	}
	k.deps.Set.Add(rs...)
	k.deps.Set.Prune(since)
	return nil
}

func (k *Keeper) prune(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, k.deps.StoreTimeout)
	defer cancel()
	n, err := k.deps.Source.PruneRevocations(ctx, k.now().Add(-k.deps.Horizon))
	if err != nil {
		return fmt.Errorf("prune revocations: %w", err)
	}
	if n > 0 {
		k.deps.Log.Info("expired revocations pruned", "count", n)
	}
	return nil
}

// listen keeps the subscription to the announcements until ctx ends.
func (k *Keeper) listen(ctx context.Context) {
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		ps := k.deps.Redis.Subscribe(ctx, Channel(k.deps.Prefix))
		subscribed, err := k.receive(ctx, ps)
		_ = ps.Close()
		k.subscribed.Store(false)
		if ctx.Err() != nil {
			return
		}
		if subscribed { // the transition is logged, not every retry
			backoff = 50 * time.Millisecond
			k.deps.Log.Warn("revocation subscription lost; revocations arrive through the store's poll until it is back",
				"poll", k.cfg.Poll.String(), "err", err)
		} else {
			k.deps.Log.Debug("revocation subscription failed", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// receive applies announcements until the subscription fails or falls
// silent, and says whether it was confirmed meanwhile. It reads until the
// next ping is due, or until the ping's answer is overdue: an idle
// subscription wakes the gateway once a pingEvery.
func (k *Keeper) receive(ctx context.Context, ps *redis.PubSub) (subscribed bool, err error) {
	// go-redis does not end a blocked read when ctx ends: closing does.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	heard := time.Now()
	var pinged time.Time // when the ping not answered yet went out
	for ctx.Err() == nil {
		due := heard.Add(k.pingEvery)
		if !pinged.IsZero() {
			due = pinged.Add(k.pongWithin)
		}
		msg, err := ps.ReceiveTimeout(ctx, max(time.Until(due), time.Millisecond))
		if err != nil {
			var ne net.Error
			if ctx.Err() != nil || !errors.As(err, &ne) || !ne.Timeout() {
				return subscribed, err
			}
			switch now := time.Now(); {
			case !pinged.IsZero():
				if now.Sub(pinged) >= k.pongWithin {
					return subscribed, errors.New("subscription silent")
				}
			case now.Sub(heard) >= k.pingEvery:
				pctx, cancel := context.WithTimeout(ctx, k.deps.RedisTimeout)
				err = ps.Ping(pctx)
				cancel()
				if err != nil {
					return subscribed, err
				}
				pinged = now
			}
			continue
		}
		heard, pinged = time.Now(), time.Time{}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				subscribed = true
				k.subscribed.Store(true)
				k.readStore() // what was announced while unsubscribed
			}
		case *redis.Message:
			r, err := decode(m.Payload)
			if err != nil {
				k.deps.Log.Warn("revocation announcement unreadable; reading the store", "err", err)
				k.readStore()
				continue
			}
			k.announced.Add(1)
			k.deps.Set.Add(r)
		}
	}
	return subscribed, ctx.Err()
}

// readStore has the poller read the store at once.
func (k *Keeper) readStore() {
	select {
	case k.reload <- struct{}{}:
	default:
	}
}
