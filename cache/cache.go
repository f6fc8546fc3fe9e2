// Package cache owns the two-key read-through cache of listings. A listing
// is cached under "realty:id:<id>" and "realty:listing:<firmId>-<no>".
// Values hold the response bytes, so a hit does no encoding.
//
// A read passes named stages, in the order read.go gives them: the local
// tier (this process's memory, no I/O), coalescing (one flight per key),
// the shared tier (Redis), admission (may this copy be served? admit.go),
// the store, and the fill of both keys. Each tier is a stage behind an
// interface (local.go, shared.go): the local tier is a front tier kept
// coherent in front of Redis (front.go), none, or without Redis the
// process's own memory, which then is the shared tier too (memory.go).
// Redis failures are misses: reads then go to the store, each Redis
// operation bounded by its own timeout (redis.go).
//
// The package also keeps the tiers coherent: writes pass through to the
// store and then publish under both keys (write.go); every gateway's
// front tier drops what another's write replaced (invalidate.go); Redis
// entries are served only while the store's change feed vouches for them
// (trust.go); Apply brings other writers' changes from the feed into
// every tier (feed.go); a floor keeps a version below a known revision,
// or a key in doubt, from being served or kept (floors.go), and keys a
// write could not update are removed once Redis answers (repair.go).
//
// Concurrency: a *Cache is safe for concurrent use. Its background work
// (the subscription, the verification of Redis, the settling of writes)
// runs in Run, and the repair of keys left old in Repair, each until its
// context ends.
package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/realty-gateway/gateway/breaker"
	"github.com/realty-gateway/gateway/coding"
	"github.com/realty-gateway/gateway/upstream"
)

// Source is the store behind the cache: reads on a miss, and the writes
// that the cache passes through and then publishes under both keys.
type Source interface {
	ListingByID(ctx context.Context, id int64) (upstream.Listing, error)
	ListingByNumber(ctx context.Context, firmID, no int64) (upstream.Listing, error)
	EncodedByID(ctx context.Context, id int64) (upstream.Encoded, error)
	EncodedByNumber(ctx context.Context, firmID, no int64) (upstream.Encoded, error)
	ImportListings(ctx context.Context, ls []upstream.Listing) ([]upstream.Listing, error)
	UpdateListing(ctx context.Context, l upstream.Listing, cond upstream.Precondition) (upstream.Listing, error)
	DeleteListing(ctx context.Context, firmID, id int64, cond upstream.Precondition) (upstream.Listing, error)
}

// Key names a listing by id (ID > 0) or by listing number.
type Key struct {
	ID     int64
	FirmID int64
	No     int64
}

// ByID is the key of a listing's id form.
func ByID(id int64) Key { return Key{ID: id} }

// ByNumber is the key of a listing's "<firmId>-<no>" form.
func ByNumber(firmID, no int64) Key { return Key{FirmID: firmID, No: no} }

func (k Key) name(prefix string) string {
	var buf [96]byte
	return string(k.appendName(buf[:0], prefix))
}

// appendName appends k's key name to b.
func (k Key) appendName(b []byte, prefix string) []byte {
	b = append(b, prefix...)
	if k.ID > 0 {
		return strconv.AppendInt(append(b, "realty:id:"...), k.ID, 10)
	}
	return append(append(b, "realty:listing:"...), upstream.ListingNumber(k.FirmID, k.No)...)
}

// State says which path answered.
type State uint8

const (
	Hit State = iota
	Miss
	Stale
)

func (s State) String() string {
	switch s {
	case Hit:
		return "HIT"
	case Stale:
		return "STALE"
	default:
		return "MISS"
	}
}

// Entry is a listing ready to send. Its slices must not be modified.
type Entry struct {
	ID     int64
	Body   []byte
	ETag   []byte
	FirmID int64
	No     int64
	Active bool
	State  State
	// Collapsed: another gateway's load answered this read (a Miss here):
	// it held the lease on the cold key (lease.go).
	Collapsed bool
	// FreshUntil is when the cached copy stops being fresh, in unix ms.
	FreshUntil int64
	// LastModified is when the store recorded this version, in unix ms,
	// always in a later second than the version before (see
	// upstream.Listing.Modified); 0: unknown.
	LastModified int64
	// LastModifiedDate is LastModified as an HTTP date (IMF-fixdate),
	// made once for a copy kept in this process; nil where the caller
	// formats it: a copy read from Redis, or a recorded time still ahead
	// of the clock.
	LastModifiedDate []byte

	// revision and variants are the version's, for Variant; held is its
	// record's, for the tiers' weighers.
	revision int64
	variants *variants
	held     int
}

// record is the record e was made from, with the variants made since.
func (e Entry) record() record {
	k := kindPassive
	if e.Active {
		k = kindActive
	}
	return record{revision: e.revision, freshUntil: e.FreshUntil, id: e.ID, firmID: e.FirmID, no: e.No, kind: k,
		etag: e.ETag, body: e.Body, modified: e.LastModified, date: e.LastModifiedDate, variants: e.variants, held: e.held}
}

// Config holds the lifetimes and bounds of the cache.
type Config struct {
	// Fresh is how long a cached listing is served without the store.
	Fresh time.Duration `yaml:"ttl" env:"CACHE_TTL" help:"how long a cached listing is fresh"`
	// Stale is how long past Fresh it may still be served while the store
	// is failing.
	Stale time.Duration `yaml:"stale" env:"CACHE_STALE" help:"how long past fresh it may be served while the store fails"`
	// Negative is how long "no such listing" is cached.
	Negative time.Duration `yaml:"negativeTTL" env:"NEGATIVE_TTL" help:"how long \"no such listing\" is cached (Redis only)"`
	// LocalBytes bounds the in-process tier: the one in front of Redis,
	// or the only one without Redis.
	LocalBytes int64 `yaml:"localBytes" env:"LOCAL_CACHE_BYTES" help:"bytes of listings kept in process; with Redis, 0 turns the local tier off"`
	// LocalMaxAge bounds how long the tier in front of Redis keeps an
	// entry: the staleness bound when invalidation fails.
	LocalMaxAge time.Duration `yaml:"localMaxAge" env:"LOCAL_CACHE_MAX_AGE" help:"longest an entry stays in the local tier in front of Redis"`
	// InvalidationWait bounds how long a write waits for the other
	// gateways to drop their local copies. At LocalMaxAge or more (the
	// default: equal), no gateway serves the version a write replaced once
	// it returns, however slow its acknowledgement: its copy has aged out
	// (front.keep). Below, a gateway slower to acknowledge may serve it
	// until it does.
	InvalidationWait time.Duration `yaml:"invalidationWait" env:"INVALIDATION_WAIT" help:"a write waits this long at most for other gateways to drop their local copies; below localMaxAge a slow gateway may serve the replaced version after the write returns"`
}

// DefaultConfig keeps listings fresh for 5 minutes and stale for an hour.
func DefaultConfig() Config {
	return Config{
		Fresh: 5 * time.Minute, Stale: time.Hour, Negative: 30 * time.Second,
		LocalBytes: 64 << 20, LocalMaxAge: 2 * time.Second, InvalidationWait: 2 * time.Second,
	}
}

// Validate reports every setting out of its range.
func (c Config) Validate() error {
	var errs []error
	if c.Fresh <= 0 {
		errs = append(errs, errors.New("cache.ttl must be positive"))
	}
	if c.Stale < 0 || c.Negative < 0 {
		errs = append(errs, errors.New("cache.stale and cache.negativeTTL must not be negative"))
	}
	if c.LocalBytes < 0 {
		errs = append(errs, errors.New("cache.localBytes must not be negative"))
	}
	if c.LocalMaxAge <= 0 || c.InvalidationWait <= 0 {
		errs = append(errs, errors.New("cache.localMaxAge and cache.invalidationWait must be positive"))
	}
	return errors.Join(errs...)
}

// Deps are a cache's collaborators and what it takes from other parts'
// settings.
type Deps struct {
	Source Source
	Log    *slog.Logger
	// Tracer, when set, records each miss's singleflight wait as a span
	// "cache singleflight", the leader's load its child, and each read of
	// the shared tier as "cache get".
	Tracer trace.TracerProvider
	// LoadTimeout bounds one shared miss: second look (at Redis when there
	// is no local tier), store call, writes.
	LoadTimeout time.Duration
	// Prefix is put before every key: Redis's key prefix.
	Prefix string
	// Compressor makes the compressed variants of listings; nil: the
	// cache makes its own.
	Compressor *coding.Compressor
}

// validate reports cfg's and d's errors.
func (d Deps) validate(cfg Config) error {
	var errs []error
	if d.Source == nil || d.Log == nil {
		errs = append(errs, errors.New("cache: source and log are required"))
	}
	if d.LoadTimeout <= 0 {
		errs = append(errs, errors.New("cache: load timeout must be positive"))
	}
	return errors.Join(append(errs, cfg.Validate())...)
}

// Cache is the read-through listing cache.
type Cache struct {
	src Source
	// local and shared are the read's tier stages (local.go, shared.go);
	// local is nil where there is none.
	local  localTier
	shared sharedTier
	// front and inv are the tier in front of Redis and the invalidations
	// that keep it coherent; redis is the Redis tier itself, for what
	// only Redis does (leases, variants added in place, its identity).
	// Each is nil without it.
	front *front
	inv   *invalidator
	redis *redisTier
	cfg   Config
	log   *slog.Logger
	// prefix is put before every key; loadTimeout bounds a shared miss.
	prefix      string
	loadTimeout time.Duration
	// tracer, when set, records the singleflight wait of a miss as a span.
	tracer     trace.Tracer
	compressor *coding.Compressor
	flights    flights
	now        func() time.Time

	counts counters
	floors *floors

	// feed is the store's change feed, nil without one. trust gates Redis
	// entries after signs that Redis missed writes, and settler marks this
	// gateway's own writes in the feed; both are nil without Redis or
	// without a feed (see trust.go).
	feed    FeedView
	trust   *trust
	settler *settler
}

// Option adds a collaborator to a Cache.
type Option func(*Cache)

// WithFeed has the cache use the store's change feed: writes settle their
// own changes, and with Redis, Redis entries are served only while the
// feed vouches for them (see trust.go).
func WithFeed(f FeedView) Option {
	return func(c *Cache) { c.feed = f }
}

func newCache(local localTier, shared sharedTier, cfg Config, deps Deps, opts []Option) (*Cache, error) {
	z := deps.Compressor
	if z == nil {
		var err error
		if z, err = coding.NewCompressor(); err != nil {
			return nil, fmt.Errorf("cache: %w", err)
		}
	}
	c := &Cache{src: deps.Source, local: local, shared: shared, cfg: cfg, log: deps.Log, prefix: deps.Prefix,
		loadTimeout: deps.LoadTimeout, compressor: z, now: time.Now}
	c.floors = newFloors(func() time.Time { return c.now() })
	if deps.Tracer != nil {
		c.tracer = deps.Tracer.Tracer("github.com/realty-gateway/gateway/cache")
	}
	for _, opt := range opts {
		opt(c)
	}
	if c.feed != nil {
		c.settler = newSettler(c.feed, c.loadTimeout, c.log)
	}
	return c, nil
}

// NewRedis returns a cache whose shared tier is Redis. Each Redis
// operation is bounded by opTimeout. With cfg.LocalBytes above zero, a
// front tier stands in front of Redis; Run must then be running for it to
// serve (see invalidator). Writes announce themselves to the other
// gateways whether or not this one has a front tier.
func NewRedis(rdb redis.UniversalClient, opTimeout time.Duration, cfg Config, deps Deps, opts ...Option) (*Cache, error) {
	err := deps.validate(cfg)
	if rdb == nil {
		err = errors.Join(err, errors.New("cache: redis client is required"))
	}
	if opTimeout <= 0 {
		err = errors.Join(err, errors.New("cache: redis timeout must be positive"))
	}
	if err != nil {
		return nil, err
	}
	rt := newRedisTier(rdb, opTimeout, deps.Log)
	c, err := newCache(nil, rt, cfg, deps, opts)
	if err != nil {
		return nil, err
	}
	var f *front // none: c.local stays a nil interface, not a nil *front
	if cfg.LocalBytes > 0 {
		f = newFront(cfg.LocalBytes, cfg.LocalMaxAge, c.floors)
		c.local = f
		if cfg.InvalidationWait < cfg.LocalMaxAge {
			deps.Log.Warn("invalidation wait below the local tier's max age: a gateway slow to acknowledge may serve a version after the write that replaced it returned",
				"invalidation_wait", cfg.InvalidationWait.String(), "local_max_age", cfg.LocalMaxAge.String())
		}
	}
	if c.feed != nil {
		c.trust = newTrust(c.feed, rt.identity, c.loadTimeout, c.floors, deps.Log)
	}
	rt.fault = c.trust.distrust
	c.shared = observed(rt, &c.counts, deps.Log)
	if c.tracer != nil {
		c.shared = traced{sharedTier: c.shared, tracer: c.tracer}
	}
	c.front, c.redis = f, rt
	c.inv = newInvalidator(invalidatorDeps{rdb: rdb, prefix: deps.Prefix, wait: cfg.InvalidationWait, timeout: opTimeout,
		front: f, apply: c.applyInvalidations, lost: c.trust.distrust, log: deps.Log})
	rt.filled, rt.leaseTTL = c.inv.filled, c.loadTimeout
	return c, nil
}

// NewLocal returns a cache kept in this process, holding at most
// cfg.LocalBytes of records: its memory is both its local and its shared
// tier. It does not cache absence found by a read: another process (an
// import) cannot clear this process's memory, and a cached "absent" would
// hide its new listings. Deletes made here are cached as absent.
func NewLocal(cfg Config, deps Deps, opts ...Option) (*Cache, error) {
	err := deps.validate(cfg)
	if cfg.LocalBytes <= 0 {
		err = errors.Join(err, errors.New("cache.localBytes must be positive without Redis: it is the only cache"))
	}
	if err != nil {
		return nil, err
	}
	cfg.Negative = 0
	m := newMemory(cfg.LocalBytes, deps.Prefix)
	return newCache(m, m, cfg, deps, opts)
}

// TierBreakerState is the state of the Redis tier's breaker; closed
// without Redis.
func (c *Cache) TierBreakerState() breaker.State {
	if c.redis == nil {
		return breaker.Closed
	}
	return c.redis.breakerState()
}

// Run keeps, until ctx ends, the subscription that makes the front tier
// coherent, the verification of Redis against the change feed, and the
// settling of this gateway's writes in the feed. With neither Redis nor a
// feed it returns at once.
func (c *Cache) Run(ctx context.Context) {
	var wg sync.WaitGroup
	if c.inv != nil {
		wg.Go(func() { c.inv.run(ctx) })
	}
	if c.trust != nil {
		wg.Go(func() { c.trust.verify(ctx) })
	}
	if c.settler != nil {
		wg.Go(func() { c.settler.run(ctx) })
	}
	wg.Wait()
}

// Subscribed is closed once this cache receives other gateways'
// invalidations and their acknowledgements; nil without Redis.
func (c *Cache) Subscribed() <-chan struct{} {
	if c.inv == nil {
		return nil
	}
	return c.inv.subscribed
}

// applyInvalidations drops the announced listings' older versions from
// this process: their floors rise, flights that started before the write
// are not joined, and the local tier forgets them.
func (c *Cache) applyInvalidations(items []Invalidation) {
	c.floors.raise(items, c.floorFor())
	for _, it := range items {
		c.flights.forget(ByID(it.ID).name(c.prefix))
		c.flights.forget(ByNumber(it.FirmID, it.No).name(c.prefix))
	}
	if c.front != nil {
		c.front.invalidate(items)
	}
}

// floorFor is how long a revision seen invalidated stands in this process:
// longer than any read of an older version can be in flight (a load, and
// a wait for a lease), and than a local copy of it lives. The Redis floor
// record stands the loads alone (floorTTL).
func (c *Cache) floorFor() time.Duration { return 2*c.loadTimeout + c.cfg.LocalMaxAge }

// listingKeys are the two keys of a listing.
func listingKeys(l upstream.Listing) [2]Key {
	return [2]Key{ByID(l.ID), ByNumber(l.FirmID, l.No)}
}

func (c *Cache) recordOf(l upstream.Listing) (record, error) {
	e, err := upstream.Encode(l)
	if err != nil {
		return record{}, err
	}
	return c.recordOfEncoded(e), nil
}

func (c *Cache) recordOfEncoded(e upstream.Encoded) record {
	k := kindPassive
	if e.Active {
		k = kindActive
	}
	return record{
		revision:   e.Revision,
		freshUntil: c.until(c.cfg.Fresh),
		id:         e.ID,
		firmID:     e.FirmID,
		no:         e.No,
		kind:       k,
		etag:       e.ETag,
		body:       e.Body,
		modified:   e.Modified,
		variants:   &variants{},
	}
}

func (c *Cache) until(d time.Duration) int64 {
	return c.now().Add(d).UnixMilli()
}

func (r *record) entry(s State) Entry {
	return Entry{ID: r.id, Body: r.body, ETag: r.etag, FirmID: r.firmID, No: r.no, Active: r.kind == kindActive, State: s,
		FreshUntil: r.freshUntil, LastModified: r.modified, LastModifiedDate: r.date, revision: r.revision, variants: r.variants,
		held: r.held}
}
