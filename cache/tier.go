package cache

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/maypok86/otter/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/realty-gateway/gateway/breaker"
)

// tier is where records are kept. get returns nil, nil on a miss. set
// writes unless the key already holds a newer revision. del removes a key.
type tier interface {
	get(ctx context.Context, name string) ([]byte, error)
	set(ctx context.Context, name string, r record, ttl time.Duration) error
	del(ctx context.Context, name string) error
}

// guardedSet writes ARGV[1] with a PX of ARGV[3] unless the key holds a
// record whose revision is greater than ARGV[2]. One key per call, so the
// two keys of a listing may live in different Redis Cluster slots.
var guardedSet = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then
  local rev = tonumber(string.match(cur, '^v1 (%d+) '))
  if rev and rev > tonumber(ARGV[2]) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
return 1
`)

// redisTier keeps records in Redis. A breaker in front of it skips Redis
// for a second after consecutive failures, so a dead, paused or slow Redis
// costs one fast error per operation instead of a timeout; one probe then
// tests whether it is back.
type redisTier struct {
	rdb redis.UniversalClient
	// pipe is rdb's auto-pipeline where the client has one (single,
	// sentinel, cluster), nil elsewhere: concurrent reads and guarded
	// writes share round trips. Its deferred face, so that a caller stops
	// waiting at its context's deadline: a queued command itself honours
	// no deadline, and behind a frozen Redis the blocking face's wait was
	// seen to last 9 times the client's read timeout. A command abandoned
	// so may still run later, as one already written to a plain
	// connection may. The revision guard keeps such a late write from
	// replacing a newer record, and where the operation timed out, do
	// counts a fault: Redis is distrusted until the change feed has
	// replayed what it may have missed.
	pipe    *redis.AutoPipeliner
	timeout time.Duration
	cb      *gobreaker.CircuitBreaker[[]byte]
	// fault is told of every failed operation: Redis may have missed a
	// write meanwhile.
	fault func()
}

// NewRedis returns a cache whose shared tier is Redis. Each Redis
// operation is bounded by opTimeout. With cfg.LocalBytes above zero, an
// in-process tier stands in front of Redis; Run must then be running for
// it to serve (see invalidator). Writes announce themselves to the other
// gateways whether or not this one has a local tier.
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
	cb := gobreaker.NewCircuitBreaker[[]byte](breaker.FastFail("redis", deps.Log))
	t := &redisTier{rdb: rdb, pipe: pipeOf(rdb), timeout: opTimeout, cb: cb}
	c, err := newCache(t, cfg, deps, opts)
	if err != nil {
		return nil, err
	}
	t.fault = c.trust.distrust
	if cfg.LocalBytes > 0 {
		c.front = newFront(cfg.LocalBytes, cfg.LocalMaxAge)
	}
	c.inv = newInvalidator(rdb, deps.Prefix, cfg.InvalidationWait, opTimeout, c.front, c.applyInvalidations, c.trust.distrust, deps.Log)
	return c, nil
}

// do runs one Redis operation under the breaker and the operation timeout.
// An operation that fails while its caller still waits is Redis's fault.
func (t *redisTier) do(ctx context.Context, op func(context.Context) ([]byte, error)) ([]byte, error) {
	b, err := t.cb.Execute(func() ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, t.timeout)
		defer cancel()
		return op(ctx)
	})
	if err != nil && ctx.Err() == nil {
		t.fault()
	}
	return b, err
}

// pipeOf returns rdb's auto-pipeline (go-redis's own, its deferred
// face), or nil where the client has none.
func pipeOf(rdb redis.UniversalClient) *redis.AutoPipeliner {
	var (
		ap  *redis.AutoPipeliner
		err error
	)
	switch c := rdb.(type) {
	case *redis.Client:
		ap, err = c.AsyncAutoPipeline()
	case *redis.ClusterClient:
		ap, err = c.AsyncAutoPipeline()
	}
	if err != nil {
		return nil
	}
	return ap
}

func (t *redisTier) get(ctx context.Context, name string) ([]byte, error) {
	return t.do(ctx, func(ctx context.Context) ([]byte, error) {
		b, err := t.read(ctx, name)
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		return b, err
	})
}

// read GETs name, in a shared round trip where it can, and returns by
// ctx's deadline whatever Redis does. A command abandoned there still runs
// in its batch; nothing reads its result.
func (t *redisTier) read(ctx context.Context, name string) ([]byte, error) {
	if t.pipe == nil {
		return t.rdb.Get(ctx, name).Bytes()
	}
	cmd := redis.NewStringCmd(ctx, "get", name)
	if err := t.pipe.Submit(ctx, cmd).WaitContext(ctx); err != nil {
		return nil, err
	}
	return cmd.Bytes()
}

// set writes one key on its own connection: a write's publication waits
// for it, and a refused connection fails there sooner than in the shared
// pipeline.
func (t *redisTier) set(ctx context.Context, name string, r record, ttl time.Duration) error {
	call := scriptCall{script: guardedSet, key: name, args: guardedSetArgs(r, ttl)}
	return t.runEach(ctx, nil, []scriptCall{call})[0]
}

// guardedSetArgs are guardedSet's ARGV for r kept for ttl.
func guardedSetArgs(r record, ttl time.Duration) []any {
	return []any{r.encode(), r.revision, ttl.Milliseconds()}
}

// multiSetter is a tier that writes several keys in one round trip.
type multiSetter interface {
	setEach(ctx context.Context, names []string, r record, ttl time.Duration) []error
}

// setEach writes r under each name through the one-key guarded script, so
// the keys may live in different Cluster slots. A miss fills its keys so,
// sharing round trips with other requests' reads and fills.
func (t *redisTier) setEach(ctx context.Context, names []string, r record, ttl time.Duration) []error {
	args := guardedSetArgs(r, ttl) // one encoding for every key
	calls := make([]scriptCall, len(names))
	for i, name := range names {
		calls[i] = scriptCall{script: guardedSet, key: name, args: args}
	}
	return t.runEach(ctx, t.pipe, calls)
}

// scriptCall is one run of a one-key script.
type scriptCall struct {
	script *redis.Script
	key    string
	args   []any
}

// runEach runs every call under the breaker and the operation timeout, by
// the script's digest through pipe where it is not nil, else in one
// pipeline of its own; calls whose script Redis lacks run again with the
// script's source (evalAgain). One error per call; the first one counts
// for the breaker, and where the breaker refused, every call has its
// error.
func (t *redisTier) runEach(ctx context.Context, pipe *redis.AutoPipeliner, calls []scriptCall) []error {
	var errs []error
	_, err := t.do(ctx, func(ctx context.Context) ([]byte, error) {
		errs = t.send(ctx, pipe, calls)
		var again []scriptCall
		var at []int
		for i, err := range errs {
			if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
				again, at = append(again, calls[i]), append(at, i)
			}
		}
		if len(again) > 0 {
			for j, err := range t.evalAgain(ctx, again) {
				errs[at[j]] = err
			}
		}
		for _, err := range errs {
			if err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
	if errs == nil { // the breaker refused
		errs = make([]error, len(calls))
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}

// evalAgain runs calls with their scripts' source (EVAL, which also keeps
// the script for later digests), in one pipeline on the plain client.
// Rare: Redis restarted, failed over or flushed its scripts. EVAL needs
// only the key's own node; SCRIPT LOAD on a cluster would need every one.
func (t *redisTier) evalAgain(ctx context.Context, calls []scriptCall) []error {
	cmds := make([]*redis.Cmd, len(calls))
	_, _ = t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range calls {
			cmds[i] = c.script.Eval(ctx, p, []string{c.key}, c.args...)
		}
		return nil
	})
	errs := make([]error, len(cmds))
	for i, cmd := range cmds {
		errs[i] = cmd.Err()
	}
	return errs
}

// send runs each call's EVALSHA through pipe, sharing round trips with
// other callers' commands, or without pipe in one pipeline of its own, and
// returns by ctx's deadline with what Redis answered.
func (t *redisTier) send(ctx context.Context, pipe *redis.AutoPipeliner, calls []scriptCall) []error {
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		args := make([]any, 0, 4+len(c.args))
		args = append(args, "evalsha", c.script.Hash(), 1, c.key)
		cmds[i] = redis.NewCmd(ctx, append(args, c.args...)...)
		cmds[i].SetFirstKeyPos(3)
	}
	errs := make([]error, len(cmds))
	switch {
	case pipe == nil && len(cmds) == 1:
		// Not a pipeline of one: go-redis's pipeline path takes twice as
		// long to give up on a refused connection.
		errs[0] = t.rdb.Process(ctx, cmds[0])
		return errs
	case pipe == nil:
		_, _ = t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, cmd := range cmds {
				_ = p.Process(ctx, cmd)
			}
			return nil
		})
		for i, cmd := range cmds {
			errs[i] = cmd.Err()
		}
		return errs
	}
	futures := make([]redis.AutoFuture, len(cmds))
	for i, cmd := range cmds {
		futures[i] = pipe.Submit(ctx, cmd)
	}
	for i, f := range futures {
		errs[i] = f.WaitContext(ctx)
	}
	return errs
}

func (t *redisTier) del(ctx context.Context, name string) error {
	_, err := t.do(ctx, func(ctx context.Context) ([]byte, error) {
		return nil, t.rdb.Del(ctx, name).Err()
	})
	return err
}

// localTier is the only tier of a gateway without Redis: records by key,
// bounded by bytes (S3-FIFO through otter).
type localTier struct {
	mu    sync.Mutex // makes the revision check and the write one step
	cache *otter.Cache[string, localValue]
	now   func() time.Time
}

// localValue keeps a record both parsed, for hits, and encoded, for the
// tier interface.
type localValue struct {
	r       record
	b       []byte
	expires time.Time
	weight  uint32 // what it costs the heap, for the byte bound
}

// localValueOverhead is what a value costs the heap beyond its encoded
// record: its key, the value, otter's node and its expiry bookkeeping.
// Measured by TestLocalWeigherMatchesTheHeap.
const localValueOverhead = 192

// NewLocal returns a cache kept in this process, holding at most
// cfg.LocalBytes of records. It does not cache absence found by a read:
// another process (an import) cannot clear this process's memory, and a
// cached "absent" would hide its new listings. Deletes made here are
// cached as absent.
func NewLocal(cfg Config, deps Deps, opts ...Option) (*Cache, error) {
	err := deps.validate(cfg)
	if cfg.LocalBytes <= 0 {
		err = errors.Join(err, errors.New("cache.localBytes must be positive without Redis: it is the only cache"))
	}
	if err != nil {
		return nil, err
	}
	cfg.Negative = 0
	c := otter.Must(&otter.Options[string, localValue]{
		MaximumWeight: uint64(cfg.LocalBytes), // positive: checked above
		Weigher:       func(_ string, v localValue) uint32 { return v.weight },
		// An entry leaves memory when it expires, not when the byte bound
		// evicts it.
		ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[string, localValue]) time.Duration {
			return time.Until(e.Value.expires)
		}),
	})
	return newCache(&localTier{cache: c, now: time.Now}, cfg, deps, opts)
}

func (t *localTier) get(_ context.Context, name string) ([]byte, error) {
	v, ok := t.cache.GetIfPresent(name)
	if !ok || !t.now().Before(v.expires) {
		return nil, nil
	}
	return v.b, nil
}

// record returns the parsed record under name, without parsing.
func (t *localTier) record(name string, now time.Time) (record, bool) {
	v, ok := t.cache.GetIfPresent(name)
	if !ok || !now.Before(v.expires) {
		return record{}, false
	}
	return v.r, true
}

func (t *localTier) set(_ context.Context, name string, r record, ttl time.Duration) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur, ok := t.cache.GetIfPresent(name); ok && t.now().Before(cur.expires) && cur.r.revision > r.revision {
		return nil
	}
	// The value keeps the body and tag in b, its encoded form, and shares
	// the variants with r: both keys of a version, written together,
	// compress it once. Every variant of a record made in this process was
	// kept since (variants.added counts it).
	shared := r.variants
	r.variants = nil
	b := r.encode()
	parsed, err := decodeRecord(b) // its slices point into b: one copy kept
	if err != nil {
		return err
	}
	if shared != nil {
		parsed.variants = shared
	}
	t.cache.Set(name, localValue{r: parsed, b: b, expires: t.now().Add(ttl), weight: localWeight(name, b, shared)})
	return nil
}

// reweigh charges name's value again, where it holds the version whose
// variants v are: a variant was added to it. Its encoded form stays
// without: a read through it only compresses again.
func (t *localTier) reweigh(name string, v *variants) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cache.ComputeIfPresent(name, func(cur localValue) (localValue, otter.ComputeOp) {
		if cur.r.variants != v {
			return cur, otter.CancelOp
		}
		cur.weight = localWeight(name, cur.b, v)
		return cur, otter.WriteOp
	})
}

// localWeight is what a value costs the heap: its key, its encoded record
// (which its parsed record's slices point into), its variants made since,
// and the overhead.
func localWeight(name string, b []byte, v *variants) uint32 {
	return uint32(min(len(name)+sizeClass(cap(b))+v.size()+localValueOverhead, 1<<31))
}

func (t *localTier) del(_ context.Context, name string) error {
	t.cache.Invalidate(name)
	return nil
}
