package cache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"

	"github.com/realty-gateway/gateway/coding"
	"github.com/realty-gateway/gateway/internal/logctx"
	"github.com/realty-gateway/gateway/upstream"
)

// A listing read, in call order:
//
//	Get ─ lookLocal:   the local tier, no I/O; admit the copy it holds
//	    └ load:        coalescing in this process: one flight per key (flights.go)
//	        flight:    holds the fleet's lease on the key; a defer
//	                   releases it where no fill ended it (lease.go)
//	        lookShared: the shared tier (Redis); admit the copy it holds; on
//	                    an empty key, take the lease, or wait for its
//	                    holder's fill (lease.wait)
//	        loadStore: the store; a failing store falls back on a stale copy
//	        fill:      both keys, version-guarded, ending the lease; then
//	                   the local tier
//
// A hit from memory uses ctx only for its span where tracing is on, so a
// caller may pass a context made on first use; a flight keeps only its
// values (detached). It reads no clock: at, the read's time, judges it.

// errNotCached is lookLocal's answer where this process holds no copy it
// may serve: the read goes on with load.
var errNotCached = errors.New("not in this process's cache")

// Get returns the listing under k: from this process's memory when it
// holds a copy it may serve at time at (the request's arrival, which the
// caller has read already), with no I/O (ctx only for its span), else past
// it through the key's flight, whose fill for a client that accepts coding
// cod carries the body compressed with it. It returns upstream.ErrNotFound
// for a listing that does not exist, and upstream.ErrUnavailable when the
// store fails and nothing usable is cached. It returns by ctx's deadline,
// with ctx's error when that comes first, while the flight goes on for
// the other callers.
func (c *Cache) Get(ctx context.Context, k Key, cod coding.Coding, at time.Time) (Entry, error) {
	r, err := c.traceLocal(ctx, k, at)
	switch {
	case err == nil:
		return r.entry(Hit), nil
	case err == errNotCached: //nolint:errorlint // lookLocal returns it bare
		return c.load(ctx, k, cod)
	}
	return Entry{}, err
}

// traceLocal looks k up in the local tier, within a span if tracing is on.
func (c *Cache) traceLocal(ctx context.Context, k Key, at time.Time) (*record, error) {
	if c.tracer == nil {
		return c.lookLocal(k, at)
	}
	_, span := c.tracer.Start(ctx, "cache local")
	r, err := c.lookLocal(k, at)
	span.SetAttributes(attribute.Bool("cache.hit", err == nil))
	span.End()
	return r, err
}

// lookLocal answers from this process's memory alone: the copy of a
// fresh listing, or upstream.ErrNotFound for a listing it knows deleted,
// else errNotCached.
func (c *Cache) lookLocal(k Key, now time.Time) (*record, error) {
	if c.local == nil {
		return nil, errNotCached
	}
	r, ok := c.local.lookup(k, now)
	if !ok {
		return nil, errNotCached
	}
	switch c.admit(k, r, now.UnixMilli(), fromLocal) {
	case admitted:
		c.counts.hits.Add(1)
		if c.front != nil {
			c.counts.localHits.Add(1)
		}
		return r, nil
	case absent:
		c.counts.negative.Add(1)
		return nil, notFound(k.name(c.prefix))
	}
	return nil, errNotCached
}

// load reads k past the local tier: it joins or starts the key's flight
// (flights.go), which reads the shared tier, then the store, and fills
// both keys.
func (c *Cache) load(ctx context.Context, k Key, cod coding.Coding) (Entry, error) {
	name := k.name(c.prefix)
	ctx, endWait := c.traceWait(ctx)
	leader := detached(ctx)
	res, err := c.flights.join(ctx, name, c.shareFlights(), c.loadTimeout, func() (any, error) {
		return c.flight(leader, k, name, cod)
	})
	if err != nil { // the caller's context ended first
		endWait(false, err)
		return Entry{}, err
	}
	return c.answer(res, endWait)
}

// shareFlights reports whether a caller may join a flight under way: only
// while Redis is trusted and this process hears every write announced,
// since a write forgets the flights it outdates (applyInvalidations). A
// flight's look at Redis may precede a write that returned before the
// caller arrived; while writes go unheard, callers wait for a fresh flight.
func (c *Cache) shareFlights() bool { return c.RedisTrusted() && c.inv.hears() }

// loaded is what a flight found.
type loaded struct {
	r     record
	state State
	// absent: a cached "no such listing" answered.
	absent bool
	// collapsed: another gateway's load answered (its lease).
	collapsed bool
}

// miss is one flight's read past the local tier: the state its stages
// share, from the look at the shared tier to the fill.
type miss struct {
	c    *Cache
	k    Key
	name string
	cod  coding.Coding // the coding whose variant the fill carries
	// began is taken before the read whose result the local tier keeps.
	began since
	// lease is the fleet's lease on the key, which the miss may take and
	// then holds until its fill ends it or the flight releases it.
	lease lease
}

// look is what a read of the shared tier found: a copy with admission's
// verdict. What became of the lease on an empty key, the lease records.
type look struct {
	r record
	v verdict
	// collapsed: another gateway's lease filled it while this one waited
	// (lease.wait).
	collapsed bool
}

// detached is what a flight keeps of its leader's context: the span and
// the request id, for its spans and logs. Not the context itself, which
// may not outlive the leader's call, nor its cancellation: the flight
// serves the other callers too.
func detached(ctx context.Context) context.Context {
	d := context.Background()
	if span := trace.SpanFromContext(ctx); span.SpanContext().IsValid() {
		d = trace.ContextWithSpan(d, span)
	}
	if id, ok := logctx.RequestID(ctx); ok {
		d = logctx.WithRequestID(d, id)
	}
	return d
}

// flight runs once per key at a time, within the load timeout, in the
// leader's detached context. Its look at the shared tier is also the
// second look of groupcache's load: a flight that ended since the
// caller's look at the local tier filled it.
func (c *Cache) flight(ctx context.Context, k Key, name string, cod coding.Coding) (loaded, error) {
	m := &miss{c: c, k: k, name: name, cod: cod, began: c.since(), lease: c.newLease(name)}
	defer m.lease.release() // where neither the store read nor the fill ended it
	found := m.lookShared(ctx)
	switch found.v {
	case admitted:
		c.keepLocal(k, found.r, m.began)
		if found.collapsed {
			return loaded{r: found.r, state: Miss, collapsed: true}, nil
		}
		return loaded{r: found.r, state: Hit}, nil
	case absent:
		return loaded{absent: true}, notFound(name)
	}
	ctx, cancel := context.WithTimeout(ctx, c.loadTimeout)
	defer cancel()
	return m.loadStore(ctx, found)
}

// since is what a read or write takes before it begins, for the local
// tier to keep what it brings: the tier's generation, and the time from
// which the copy ages (front.keep).
type since struct {
	gen uint64
	at  time.Time
}

func (c *Cache) since() since { return since{gen: c.generation(), at: c.now()} }

// lookShared reads the key from the shared tier, within the tier's
// operation timeout, and admits what it holds. Where the key is cold the
// read takes the fleet's lease on it, or waits for the fill of the
// gateway that holds it (lease.go); a look that fails is no lease held
// elsewhere, and the miss loads at once.
func (m *miss) lookShared(ctx context.Context) look {
	found := m.c.readShared(ctx, m.k, m.name, &m.lease)
	if m.lease.heldElsewhere() {
		return m.lease.wait(ctx, m.c, m.k)
	}
	return found
}

// readShared reads k from the shared tier and admits what it holds; where
// the key is empty it takes the lease l, if wanted, or finds it taken.
// Errors and unreadable values are misses; an unwritten key is removed
// first.
func (c *Cache) readShared(ctx context.Context, k Key, name string, l *lease) look {
	b, err := c.shared.get(ctx, name, l)
	if err != nil || b == nil {
		return look{v: missing}
	}
	r, err := decodeRecord(b)
	if err != nil {
		c.counts.corrupt.Add(1)
		c.log.WarnContext(ctx, "cache value unreadable, treated as miss", "key", name, "err", err)
		return look{v: missing}
	}
	v := c.admit(k, &r, c.now().UnixMilli(), fromShared)
	switch v {
	case foreign:
		c.counts.corrupt.Add(1)
		c.log.WarnContext(ctx, "cache value unreadable, treated as miss", "key", name, "err", errForeign)
	case floored:
		if c.floors.unwrittenKey(k) {
			c.repair(ctx, k)
		}
	}
	return look{r: r, v: v}
}

// loadStore reads the listing from the store and fills both keys, ending
// the lease where the miss holds one. prev is the shared tier's copy: a
// failing store falls back on it where it is a listing that only aged or
// is distrusted.
func (m *miss) loadStore(ctx context.Context, prev look) (loaded, error) {
	c := m.c
	c.counts.storeLoads.Add(1)
	var e upstream.Encoded
	var err error
	if m.k.ID > 0 {
		e, err = c.src.EncodedByID(ctx, m.k.ID)
	} else {
		e, err = c.src.EncodedByNumber(ctx, m.k.FirmID, m.k.No)
	}
	switch {
	case errors.Is(err, upstream.ErrNotFound):
		absence := record{kind: kindAbsent, etag: []byte("-"), freshUntil: c.until(c.cfg.Negative)}
		c.remember(ctx, absence, c.cfg.Negative, &m.lease, m.k)
		return loaded{}, err
	case err != nil: // the flight's deferred release tells the waiters
		if prev.v.fallback() && prev.r.kind != kindAbsent {
			c.log.DebugContext(ctx, "serving stale listing", "key", m.name, "err", err)
			return loaded{r: prev.r, state: Stale}, nil
		}
		return loaded{}, err
	}
	r := c.recordOfEncoded(e)
	if m.cod != coding.Identity {
		c.compressInto(r, m.cod) // the fill carries it: no later round trip adds it
	}
	m.fill(ctx, r)
	return loaded{r: r, state: Miss}, nil
}

// fill writes r under both of its keys, ending the lease, then keeps it
// in the local tier under the miss's key, as of the read's start, and
// before the flight ends: the next flight's look finds it.
func (m *miss) fill(ctx context.Context, r record) {
	c := m.c
	c.remember(ctx, r, c.cfg.Fresh+c.cfg.Stale, &m.lease, ByID(r.id), ByNumber(r.firmID, r.no))
	c.keepLocal(m.k, r, m.began)
}

// remember writes r under names in the shared tier, each guarded by its
// revision, in one round trip where the tier can; a failed write only
// costs a later miss. A key that a write could not update takes nothing
// older than that write (floors.go). The write of l's key ends the lease l
// where it lands; where it does not, the flight's deferred release ends l.
func (c *Cache) remember(ctx context.Context, r record, ttl time.Duration, l *lease, keys ...Key) {
	keys = slices.DeleteFunc(keys, func(k Key) bool {
		return ttl <= 0 || c.floors.unwrittenAbove(k, r.revision)
	})
	if len(keys) == 0 {
		return
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.name(c.prefix)
	}
	for i, err := range c.shared.fill(ctx, names, r, ttl, l) {
		if err == nil {
			c.floors.written(keys[i]) // it now holds what the store has
		}
	}
}

// answer turns a flight's result into the caller's entry and counts it.
func (c *Cache) answer(res singleflight.Result, endWait func(shared bool, err error)) (Entry, error) {
	endWait(res.Shared, res.Err)
	if res.Shared {
		c.counts.joined.Add(1)
	}
	l, _ := res.Val.(loaded)
	if l.absent {
		c.counts.negative.Add(1)
	}
	if res.Err != nil {
		return Entry{}, res.Err
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
	e := l.r.entry(l.state)
	e.Collapsed = l.collapsed
	return e, nil
}

// notFound is the error of a listing known absent under name.
func notFound(name string) error {
	return fmt.Errorf("listing %s: %w", name, upstream.ErrNotFound)
}
