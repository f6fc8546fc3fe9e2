// Package cache owns the two-key read-through cache of listings. A listing
// is cached under "realty:id:<id>" and "realty:listing:<firmId>-<no>"; a miss
// on either form loads it once from the store (singleflight, then a second
// look at the cache inside the flight, as groupcache's load does) and writes
// both keys. Values hold the response bytes, so a hit does no encoding.
//
// The shared tier is Redis when configured, else an in-process LRU. Redis
// failures are misses: reads then go to the store, each Redis operation
// bounded by its own timeout.
//
// The package also keeps the tiers coherent: writes pass through to the
// store and then publish under both keys (write.go); with Redis, a local
// tier in front of it is kept coherent by invalidations announced to every
// gateway (front.go, invalidate.go), and Redis entries are served only
// while the store's change feed vouches for them (trust.go); Apply brings
// other writers' changes from the feed into every tier (feed.go).
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
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"

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
	// FreshUntil is when the cached copy stops being fresh, in unix ms.
	FreshUntil int64
	// LastModified is when the store recorded this version, in unix ms,
	// always in a later second than the version before (see
	// upstream.Listing.Modified); 0: unknown.
	LastModified int64

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
		etag: e.ETag, body: e.Body, modified: e.LastModified, variants: e.variants, held: e.held}
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
	// gateways to drop their local copies.
	InvalidationWait time.Duration `yaml:"invalidationWait" env:"INVALIDATION_WAIT" help:"a write waits this long at most for other gateways to drop their local copies"`
}

// DefaultConfig keeps listings fresh for 5 minutes and stale for an hour.
func DefaultConfig() Config {
	return Config{
		Fresh: 5 * time.Minute, Stale: time.Hour, Negative: 30 * time.Second,
		LocalBytes: 64 << 20, LocalMaxAge: 2 * time.Second, InvalidationWait: 50 * time.Millisecond,
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
	src  Source
	tier tier
	// front and inv are the in-process tier in front of Redis and the
	// invalidations that keep it coherent; nil without them.
	front *front
	inv   *invalidator
	cfg   Config
	log   *slog.Logger
	// prefix is put before every key; loadTimeout bounds a shared miss.
	prefix      string
	loadTimeout time.Duration
	// tracer, when set, records the singleflight wait of a miss as a span.
	tracer     trace.Tracer
	compressor *coding.Compressor
	group      singleflight.Group
	queued     freshFlights // instead of group while Redis is not trusted
	now        func() time.Time

	counts counters
	// tierDown is whether the last tier operation failed; observe logs
	// only its changes.
	tierDown atomic.Bool

	// dirty are keys that a write could neither update nor remove: they
	// may hold an old version. They are never served until repaired.
	dirtyMu    sync.Mutex
	dirty      map[string]int64 // key: the revision that failed to publish
	dirtyCount atomic.Int64
	dirtied    chan struct{} // wakes Repair, which sleeps while nothing is dirty

	// trust gates Redis entries after signs that Redis missed writes, and
	// settler marks this gateway's own writes in the store's change feed;
	// both are nil without Redis or without a feed (see trust.go).
	trust   *trust
	settler *settler
}

// Option adds a collaborator to a Cache.
type Option func(*Cache)

// WithFeed has the cache use the store's change feed: writes settle their
// own changes, and with Redis, Redis entries are served only while the
// feed vouches for them (see trust.go).
func WithFeed(f FeedView) Option {
	return func(c *Cache) {
		c.settler = newSettler(f, c.loadTimeout, c.log)
		if _, ok := c.tier.(*redisTier); ok {
			c.trust = newTrust(f)
		}
	}
}

func newCache(t tier, cfg Config, deps Deps, opts []Option) (*Cache, error) {
	z := deps.Compressor
	if z == nil {
		var err error
		if z, err = coding.NewCompressor(); err != nil {
			return nil, fmt.Errorf("cache: %w", err)
		}
	}
	c := &Cache{src: deps.Source, tier: t, cfg: cfg, log: deps.Log, prefix: deps.Prefix, loadTimeout: deps.LoadTimeout,
		compressor: z, now: time.Now, dirty: map[string]int64{}, dirtied: make(chan struct{}, 1)}
	if deps.Tracer != nil {
		c.tracer = deps.Tracer.Tracer("github.com/realty-gateway/gateway/cache")
	}
	for _, opt := range opts {
		opt(c)
	}
	return c, nil
}

// Cached answers from this process's memory alone: the local tier in
// front of Redis, or the in-process tier without Redis. It does no I/O, so
// a caller can answer a hot listing before it sets up anything for a miss.
func (c *Cache) Cached(k Key, now time.Time) (Entry, bool) {
	if c.front != nil {
		e, ok := c.front.get(k, now)
		if ok {
			c.counts.hits.Add(1)
			c.counts.localHits.Add(1)
		}
		return e, ok
	}
	lt, ok := c.tier.(*localTier)
	if !ok {
		return Entry{}, false
	}
	// The name is looked up, never kept: built on the stack, it costs a
	// hit no allocation. (Were the lookup ever to keep it, escape analysis
	// would move buf to the heap: memory stays safe.)
	var buf [96]byte
	name := k.appendName(buf[:0], c.prefix)
	r, ok := lt.record(unsafe.String(unsafe.SliceData(name), len(name)), now)
	if !ok || r.kind == kindAbsent || r.kind == kindFloor || !r.belongsTo(k) || now.UnixMilli() >= r.freshUntil {
		return Entry{}, false
	}
	c.counts.hits.Add(1)
	return r.entry(Hit), true
}

// Get returns the listing under k. It returns upstream.ErrNotFound for a
// listing that does not exist and upstream.ErrUnavailable when the store
// fails and nothing usable is cached. It returns by ctx's deadline, with
// ctx's error when that comes first, while the shared load goes on for the
// other callers; a caller whose deadline leaves the load's whole bound runs
// or joins the load on its own goroutine, and a cancellation before its
// deadline then waits for the load.
func (c *Cache) Get(ctx context.Context, k Key) (Entry, error) {
	var gen uint64
	if c.front != nil {
		if e, ok := c.front.get(k, c.now()); ok {
			c.counts.hits.Add(1)
			c.counts.localHits.Add(1)
			return e, nil
		}
		gen = c.front.generation()
	}
	name := k.name(c.prefix)
	looked, found := c.lookup(ctx, k, name)
	if found && c.servable(k, looked) {
		e, err := cached(looked, name)
		if err == nil {
			c.counts.hits.Add(1)
			c.counts.tierHits.Add(1)
			c.keep(k, looked, gen)
		} else {
			c.counts.negative.Add(1)
		}
		return e, err
	}

	ctx, endWait := c.traceWait(ctx)
	load := func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.loadTimeout)
		defer cancel()
		return c.load(ctx, k, name, looked, found, gen)
	}
	var ch <-chan singleflight.Result
	switch {
	case !c.RedisTrusted(): // another gateway's write may not be announced here
		ch = c.queued.doChan(name, load)
	case c.outlastsLoad(ctx):
		// The load ends within the caller's deadline, so the caller can run
		// it, or wait for it, on its own goroutine: no goroutine per flight,
		// whose stack would grow on every miss.
		v, err, shared := c.group.Do(name, load)
		return c.answer(singleflight.Result{Val: v, Err: err, Shared: shared}, endWait)
	default:
		ch = c.group.DoChan(name, load)
	}
	select {
	case <-ctx.Done():
		endWait(false, ctx.Err())
		return Entry{}, ctx.Err()
	case res := <-ch:
		return c.answer(res, endWait)
	}
}

// outlastsLoad reports whether ctx's deadline leaves a whole load's bound:
// then waiting for a flight cannot outlast the caller's deadline (only a
// cancellation before it, for at most that bound). Without a deadline the
// caller waits on a channel, so that it can leave early.
func (c *Cache) outlastsLoad(ctx context.Context) bool {
	deadline, ok := ctx.Deadline()
	return ok && ctx.Err() == nil && time.Until(deadline) >= c.loadTimeout
}

// answer turns a flight's result into the caller's entry and counts it.
func (c *Cache) answer(res singleflight.Result, endWait func(shared bool, err error)) (Entry, error) {
	endWait(res.Shared, res.Err)
	if res.Shared {
		c.counts.shared.Add(1)
	}
	if res.Err != nil {
		return Entry{}, res.Err
	}
	l := res.Val.(loaded)
	if l.local {
		c.counts.hits.Add(1)
		c.counts.localHits.Add(1)
		return l.e, nil
	}
	switch l.state {
	case Hit:
		c.counts.hits.Add(1)
		c.counts.tierHits.Add(1)
	case Stale:
		c.counts.stale.Add(1)
	default:
		c.counts.misses.Add(1)
	}
	return l.r.entry(l.state), nil // the flight kept it locally
}

// traceWait starts the span of a singleflight wait, if tracing is on, and
// returns the function that ends it.
func (c *Cache) traceWait(ctx context.Context) (context.Context, func(shared bool, err error)) {
	if c.tracer == nil {
		return ctx, endNoSpan
	}
	ctx, span := c.tracer.Start(ctx, "cache singleflight")
	return ctx, func(shared bool, err error) {
		span.SetAttributes(attribute.Bool("singleflight.shared", shared))
		if err != nil && !errors.Is(err, upstream.ErrNotFound) {
			span.SetStatus(codes.Error, "load failed")
		}
		span.End()
	}
}

func endNoSpan(bool, error) {}

// tierGet reads name from the tier, in a span "cache get" when tracing is
// on: Redis reads are auto-pipelined, shared by the requests of a batch,
// so the client's own spans of them belong to no request.
func (c *Cache) tierGet(ctx context.Context, name string) ([]byte, error) {
	if c.tracer == nil {
		return c.tier.get(ctx, name)
	}
	ctx, span := c.tracer.Start(ctx, "cache get")
	defer span.End()
	b, err := c.tier.get(ctx, name)
	span.SetAttributes(attribute.Bool("cache.found", b != nil))
	if err != nil {
		span.SetStatus(codes.Error, "tier read failed")
	}
	return b, err
}

// tierSetEach writes r under names through mt, in a span "cache set" when
// tracing is on: like reads, these writes are auto-pipelined.
func (c *Cache) tierSetEach(ctx context.Context, mt multiSetter, names []string, r record, ttl time.Duration) []error {
	if c.tracer == nil {
		return mt.setEach(ctx, names, r, ttl)
	}
	ctx, span := c.tracer.Start(ctx, "cache set")
	defer span.End()
	errs := mt.setEach(ctx, names, r, ttl)
	if slices.ContainsFunc(errs, func(err error) bool { return err != nil }) {
		span.SetStatus(codes.Error, "tier write failed")
	}
	return errs
}

// loaded is what a shared load found: a record, or (local) the local
// tier's entry.
type loaded struct {
	r     record
	state State
	local bool
	e     Entry
}

// keep puts a fresh record into the front tier, if there is one.
func (c *Cache) keep(k Key, r record, gen uint64) {
	if c.front != nil {
		c.front.put(k, r, gen, c.now())
	}
}

// load runs once per key at a time. prev and found are the leader's look
// at the tier, which a failing store falls back on; gen is the local
// tier's generation before that look.
//
// Inside the flight it looks again, for a flight that ended since the
// leader's look: at the local tier while it serves, as a flight puts what
// it loaded there before it ends, so the look costs no round trip; else at
// Redis. (A listing found missing is not kept locally, so a miss on an
// absent listing that races another's flight may read the store once
// more.)
func (c *Cache) load(ctx context.Context, k Key, name string, prev record, found bool, gen uint64) (loaded, error) {
	if c.front != nil && c.front.serving() {
		if e, ok := c.front.get(k, c.now()); ok {
			return loaded{local: true, e: e}, nil
		}
	} else if r, ok := c.lookup(ctx, k, name); ok {
		prev, found = r, true
		if c.servable(k, r) {
			if _, err := cached(r, name); err != nil {
				return loaded{}, err
			}
			c.keep(k, r, gen)
			return loaded{r: r, state: Hit}, nil
		}
	}

	c.counts.storeLoads.Add(1)
	var e upstream.Encoded
	var err error
	if k.ID > 0 {
		e, err = c.src.EncodedByID(ctx, k.ID)
	} else {
		e, err = c.src.EncodedByNumber(ctx, k.FirmID, k.No)
	}
	switch {
	case errors.Is(err, upstream.ErrNotFound):
		c.remember(ctx, record{kind: kindAbsent, etag: []byte("-"), freshUntil: c.until(c.cfg.Negative)}, c.cfg.Negative, name)
		return loaded{}, err
	case err != nil:
		if found && prev.kind != kindAbsent {
			c.log.DebugContext(ctx, "serving stale listing", "key", name, "err", err)
			return loaded{r: prev, state: Stale}, nil
		}
		return loaded{}, err
	}

	r := c.recordOfEncoded(e)
	names := [2]string{ByID(e.ID).name(c.prefix), ByNumber(e.FirmID, e.No).name(c.prefix)}
	c.remember(ctx, r, c.cfg.Fresh+c.cfg.Stale, names[:]...)
	// Once per flight, under the leader's generation, and before the flight
	// ends: the next flight's second look finds it.
	c.keep(k, r, gen)
	return loaded{r: r, state: Miss}, nil
}

// TierBreakerState is the state of the Redis tier's breaker; closed
// without Redis.
func (c *Cache) TierBreakerState() breaker.State {
	if t, ok := c.tier.(*redisTier); ok {
		return breaker.StateOf(t.cb)
	}
	return breaker.Closed
}

// Run keeps, until ctx ends, the subscription that makes the local tier in
// front of Redis coherent, the verification of Redis against the change
// feed, and the settling of this gateway's writes in the feed. With
// neither Redis nor a feed it returns at once.
func (c *Cache) Run(ctx context.Context) {
	var wg sync.WaitGroup
	if c.inv != nil {
		wg.Go(func() { c.inv.run(ctx) })
	}
	if c.trust != nil {
		wg.Go(func() { c.verify(ctx) })
	}
	if c.settler != nil {
		wg.Go(func() { c.settler.run(ctx) })
	}
	wg.Wait()
}

// trustedIdentity is the identity of the Redis this gateway verified, and
// whether it trusts it now. Without Redis or a feed it trusts its one tier.
func (c *Cache) trustedIdentity() (string, bool) {
	if c.trust == nil {
		return "", true
	}
	id := c.trust.identity.Load()
	if id == nil || c.trust.state.Load() != trusted {
		return "", false
	}
	return *id, true
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

// Subscribed is closed once this cache receives other gateways'
// invalidations and their acknowledgements; nil without Redis.
func (c *Cache) Subscribed() <-chan struct{} {
	if c.inv == nil {
		return nil
	}
	return c.inv.subscribed
}

// applyInvalidations drops the announced listings' older versions.
func (c *Cache) applyInvalidations(items []Invalidation) {
	for _, it := range items {
		// Flights that started before the write must not be joined.
		c.group.Forget(ByID(it.ID).name(c.prefix))
		c.group.Forget(ByNumber(it.FirmID, it.No).name(c.prefix))
	}
	if c.front != nil {
		c.front.invalidate(items, c.now(), c.floorFor())
	}
}

// floorFor is how long a revision seen invalidated refuses older puts:
// longer than any read of an older version can be in flight.
func (c *Cache) floorFor() time.Duration { return 2*c.loadTimeout + c.cfg.LocalMaxAge }

// cached answers from a fresh record: the listing, or "absent".
func cached(r record, name string) (Entry, error) {
	if r.kind == kindAbsent {
		return Entry{}, fmt.Errorf("listing %s: %w", name, upstream.ErrNotFound)
	}
	return r.entry(Hit), nil
}

// names are the two keys of a listing.
func (c *Cache) names(l upstream.Listing) [2]string {
	return [2]string{ByID(l.ID).name(c.prefix), ByNumber(l.FirmID, l.No).name(c.prefix)}
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

func (c *Cache) fresh(r record) bool {
	return c.now().UnixMilli() < r.freshUntil
}

// servable reports whether a record looked up under k may answer a read:
// fresh, and not a possibly old Redis entry (see trust.go).
func (c *Cache) servable(k Key, r record) bool {
	return c.fresh(r) && c.trust.allows(k)
}

func (r record) entry(s State) Entry {
	return Entry{ID: r.id, Body: r.body, ETag: r.etag, FirmID: r.firmID, No: r.no, Active: r.kind == kindActive, State: s,
		FreshUntil: r.freshUntil, LastModified: r.modified, revision: r.revision, variants: r.variants, held: r.held}
}

// lookup reads a key from the tier. Errors, corrupt or foreign values and
// keys that may hold an old version are misses.
func (c *Cache) lookup(ctx context.Context, k Key, name string) (record, bool) {
	if _, dirty := c.dirtyRevision(name); dirty && !c.repair(ctx, name) {
		return record{}, false
	}
	b, err := c.tierGet(ctx, name)
	c.observe(err)
	if err != nil || b == nil {
		return record{}, false
	}
	r, err := decodeRecord(b)
	if err == nil && !r.belongsTo(k) {
		err = errForeign
	}
	if err != nil {
		c.counts.corrupt.Add(1)
		c.log.WarnContext(ctx, "cache value unreadable, treated as miss", "key", name, "err", err)
		return record{}, false
	}
	return r, r.kind != kindFloor // a floor holds nothing to serve
}

// remember writes r under names, in one round trip where the tier can; a
// failed write only costs a later miss.
func (c *Cache) remember(ctx context.Context, r record, ttl time.Duration, names ...string) {
	if ttl <= 0 {
		return
	}
	names = slices.DeleteFunc(names, func(name string) bool {
		rev, dirty := c.dirtyRevision(name)
		return dirty && r.revision < rev // older than a write that could not be published
	})
	errs := make([]error, len(names))
	if mt, ok := c.tier.(multiSetter); ok && len(names) > 1 {
		errs = c.tierSetEach(ctx, mt, names, r, ttl)
	} else {
		for i, name := range names {
			errs[i] = c.tier.set(ctx, name, r, ttl)
		}
	}
	for i, err := range errs {
		c.observe(err)
		if err == nil {
			c.clean(names[i]) // it now holds what the store has
		}
	}
}

// observe counts tier errors and logs only the transitions between a
// working and a failing tier, so an outage does not flood the log.
func (c *Cache) observe(err error) {
	if err == nil {
		// A load first: a compare-and-swap on every hit would contend.
		if c.tierDown.Load() && c.tierDown.CompareAndSwap(true, false) {
			c.log.Info("cache tier recovered")
		}
		return
	}
	c.counts.tierErrors.Add(1)
	if c.tierDown.CompareAndSwap(false, true) {
		c.log.Warn("cache tier failing, reading through to the store", "err", err)
	}
}
