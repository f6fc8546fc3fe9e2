package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/realty-gateway/gateway/breaker"
)

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
	// filled is the channel on which a lease's release announces its fill;
	// leaseTTL is how long a lease lives: the load timeout.
	filled   string
	leaseTTL time.Duration
	// looks tells whether a look takes an empty key's lease in its own
	// round trip.
	looks coldLooks
}

func newRedisTier(rdb redis.UniversalClient, opTimeout time.Duration, log *slog.Logger) *redisTier {
	cb := gobreaker.NewCircuitBreaker[[]byte](breaker.FastFail("redis", log))
	return &redisTier{rdb: rdb, pipe: pipeOf(rdb), timeout: opTimeout, cb: cb, fault: func() {}}
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

// get reads name. Where l is wanted, l's look reads it instead and
// takes the lease on an empty key (lease.go).
func (t *redisTier) get(ctx context.Context, name string, l *lease) ([]byte, error) {
	if l.wanted() {
		return l.look(ctx, t)
	}
	return t.getValue(ctx, name)
}

// getValue GETs name under the breaker and the operation timeout: nil
// where the key is empty.
func (t *redisTier) getValue(ctx context.Context, name string) ([]byte, error) {
	return t.do(ctx, func(ctx context.Context) ([]byte, error) {
		b, err := t.read(ctx, name)
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		return b, err
	})
}

// evalOne runs script on keys through the auto-pipeline by its digest, or
// with its source where Redis lacks it, and returns its answer.
func (t *redisTier) evalOne(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	if t.pipe == nil {
		return script.Run(ctx, t.rdb, keys, args...).Result()
	}
	cmd := redis.NewCmd(ctx, scriptArgs("evalsha", script.Hash(), keys, args)...)
	cmd.SetFirstKeyPos(3)
	err := t.pipe.Submit(ctx, cmd).WaitContext(ctx)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		return script.Eval(ctx, t.rdb, keys, args...).Result()
	}
	if err != nil {
		return nil, err
	}
	return cmd.Val(), nil
}

// scriptArgs are an EVAL's or EVALSHA's arguments.
func scriptArgs(verb, script string, keys []string, args []any) []any {
	out := make([]any, 0, 3+len(keys)+len(args))
	out = append(out, verb, script, len(keys))
	for _, k := range keys {
		out = append(out, k)
	}
	return append(out, args...)
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

// guardedSetArgs are guardedSet's value, revision and ttl for r kept for ttl.
func guardedSetArgs(r record, ttl time.Duration) []any {
	return []any{r.encode(), r.revision, ttl.Milliseconds()}
}

// fill writes r under each name through the one-key guarded script, so
// the keys may live in different Cluster slots, sharing round trips with
// other requests' reads and fills. The fill of l's key ends l (lease.go).
func (t *redisTier) fill(ctx context.Context, names []string, r record, ttl time.Duration, l *lease) []error {
	args := guardedSetArgs(r, ttl) // one encoding for every key
	calls := make([]scriptCall, len(names))
	for i, name := range names {
		calls[i] = l.fill(name, args, t.filled)
	}
	errs := t.runEach(ctx, t.pipe, calls)
	for i, err := range errs {
		l.landed(names[i], err)
	}
	return errs
}

// write runs every write's script in one pipeline of its own (see
// runEach), a single one on its own connection: a write's publication
// waits for it, and a refused connection fails there sooner than in the
// shared pipeline. Each key is its own command, so keys may live in
// different Cluster slots.
//
// A write also ends the key's lease, if any gateway holds one, and wakes
// the gateways that wait on it (lease.go): the holder's fill would be
// older than the write, and its waiters answer from the write at once.
func (t *redisTier) write(ctx context.Context, writes []keyWrite) []error {
	calls := make([]scriptCall, len(writes))
	for i, w := range writes {
		c := scriptCall{script: guardedSet.Script, key: w.name, args: guardedSetArgs(w.value, w.ttl)}
		endingLease := guardedSetEndingLease.Script
		if w.ifCached {
			c.script, endingLease = refreshOrFloor.Script, refreshOrFloorEndingLease.Script
			c.args = append(c.args, w.floor.encode(), time.Until(time.UnixMilli(w.floor.freshUntil)).Milliseconds())
		}
		if lease := leaseKey(w.name); lease != "" && t.filled != "" { // else no lease shares the key's slot, or none is taken
			c.script, c.lease, c.args = endingLease, lease, append(c.args, t.filled)
		}
		calls[i] = c
	}
	return t.runEach(ctx, nil, calls)
}

// scriptCall is one run of a script on key, and on the key's lease where
// lease is set.
type scriptCall struct {
	script *redis.Script
	key    string
	lease  string
	args   []any
}

func (c scriptCall) keys() []string {
	if c.lease != "" {
		return []string{c.key, c.lease}
	}
	return []string{c.key}
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
			cmds[i] = c.script.Eval(ctx, p, c.keys(), c.args...)
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
		cmds[i] = redis.NewCmd(ctx, scriptArgs("evalsha", c.script.Hash(), c.keys(), c.args)...)
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

func (t *redisTier) breakerState() breaker.State { return breaker.StateOf(t.cb) }

// addVariants adds r's variants to the records under names. It is best
// effort and does not wait: the commands go out in the auto-pipeline's
// next batch, with the script's source (EVAL), so that no answer needs
// reading. A failure costs a later read the compression, and the script
// cannot replace a newer version, so it is not a sign that Redis missed a
// write; neither the breaker nor the trust in Redis hears of it.
func (t *redisTier) addVariants(names []string, r record) {
	if t.pipe == nil || t.cb.State() == gobreaker.StateOpen {
		return
	}
	ctx := context.Background()
	value := r.encode()
	for _, name := range names {
		cmd := redis.NewCmd(ctx, "eval", addVariants.src, 1, name, r.revision, string(r.etag), value)
		cmd.SetFirstKeyPos(3) // the key's slot, on a cluster
		t.pipe.Submit(ctx, cmd)
	}
}

// identity names the Redis behind the client: the run ids of its
// masters, which change with every restart and failover.
func (t *redisTier) identity(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 4*t.timeout)
	defer cancel()
	return redisIdentity(ctx, t.rdb)
}

func redisIdentity(ctx context.Context, rdb redis.UniversalClient) (string, error) {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		var (
			mu  sync.Mutex
			ids []string
		)
		err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			id, err := runID(ctx, node)
			mu.Lock()
			defer mu.Unlock()
			ids = append(ids, id)
			return err
		})
		if err != nil {
			return "", err
		}
		slices.Sort(ids)
		return strings.Join(ids, ","), nil
	}
	return runID(ctx, rdb)
}

func runID(ctx context.Context, rdb redis.Cmdable) (string, error) {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", errors.New("redis INFO names no run_id")
}

// empty reports whether Redis holds no key at all.
func (t *redisTier) empty(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 4*t.timeout)
	defer cancel()
	var keys atomic.Int64
	count := func(ctx context.Context, node redis.Cmdable) error {
		n, err := node.DBSize(ctx).Result()
		keys.Add(n)
		return err
	}
	var err error
	if cc, isCluster := t.rdb.(*redis.ClusterClient); isCluster {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return count(ctx, node) })
	} else {
		err = count(ctx, t.rdb)
	}
	if err != nil {
		return false, fmt.Errorf("redis size: %w", err)
	}
	return keys.Load() == 0, nil
}
