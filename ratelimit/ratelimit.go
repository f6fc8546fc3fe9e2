// Package ratelimit owns the login limits: GCRA counters kept in Redis
// through redis_rate, so that every gateway shares them, with an
// in-process limiter per key taking over while Redis cannot answer, so that
// an outage never opens the limits wide. A breaker skips a failing Redis
// quickly.
//
// Concurrency: a *Limiter is safe for concurrent use.
package ratelimit

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/realty-gateway/gateway/breaker"
)

// Limit allows Count events per Period, all of them at once if need be.
// Name keeps the in-process counters of one limit apart from every other
// limit's, so that a flood under one cannot evict another's counters.
type Limit struct {
	Name   string
	Count  int
	Period time.Duration
}

func (lim Limit) interval() time.Duration { return lim.Period / time.Duration(lim.Count) }

// Limiter counts events per key.
type Limiter struct {
	redis   *redis_rate.Limiter // nil without Redis
	rdb     redis.UniversalClient
	cb      *gobreaker.CircuitBreaker[*redis_rate.Result]
	prefix  string
	timeout time.Duration
	log     *slog.Logger

	mu       sync.Mutex
	local    map[string]*lru.Cache[string, *gcra] // by Limit.Name
	degraded atomic.Bool
}

// localKeys bounds the in-process counters of one limit.
const localKeys = 100_000

// New returns a Limiter on rdb, or in process only when rdb is nil. Each
// Redis call is bounded by timeout.
func New(rdb redis.UniversalClient, prefix string, timeout time.Duration, log *slog.Logger) (*Limiter, error) {
	if log == nil {
		return nil, errors.New("ratelimit: log is required")
	}
	if rdb != nil && timeout <= 0 {
		return nil, errors.New("ratelimit: redis timeout must be positive")
	}
	l := &Limiter{prefix: prefix, timeout: timeout, log: log, local: map[string]*lru.Cache[string, *gcra]{}}
	if rdb != nil {
		l.rdb = rdb
		l.redis = redis_rate.NewLimiter(rdb)
		l.cb = gobreaker.NewCircuitBreaker[*redis_rate.Result](breaker.FastFail("ratelimit-redis", log))
	}
	return l, nil
}

// Take counts one event under key and returns how long to wait before
// another is allowed: zero when this one is allowed. A refused event is
// not counted.
func (l *Limiter) Take(ctx context.Context, key string, lim Limit) time.Duration {
	wait, _ := l.Reserve(ctx, key, lim)
	return wait
}

// Reserve counts one event under key at once, before its outcome is known,
// so that parallel events cannot all pass a check before any is counted.
// When the event is allowed (zero wait), refund gives the count back, for
// an event that turned out not to count (a login that succeeded). Refund
// never blocks for longer than the Redis timeout and may be called once.
func (l *Limiter) Reserve(ctx context.Context, key string, lim Limit) (wait time.Duration, refund func(context.Context)) {
	if l.redis != nil {
		res, err := l.cb.Execute(func() (*redis_rate.Result, error) {
			ctx, cancel := context.WithTimeout(ctx, l.timeout)
			defer cancel()
			return l.redis.AllowN(ctx, l.prefix+key, redisLimit(lim), 1)
		})
		if err == nil {
			if l.degraded.CompareAndSwap(true, false) {
				l.log.Info("rate limits back on Redis")
			}
			if res.Allowed == 0 {
				return max(res.RetryAfter, time.Nanosecond), noRefund
			}
			return 0, func(ctx context.Context) { l.refundRedis(ctx, key, lim) }
		}
		if l.degraded.CompareAndSwap(false, true) {
			l.log.WarnContext(ctx, "rate limits falling back to this process", "err", err)
		}
	}
	return l.reserveLocal(key, lim)
}

func noRefund(context.Context) {}

// BreakerState is the state of the breaker in front of Redis; closed
// without Redis.
func (l *Limiter) BreakerState() breaker.State {
	if l.cb == nil {
		return breaker.Closed
	}
	return breaker.StateOf(l.cb)
}

func redisLimit(lim Limit) redis_rate.Limit {
	return redis_rate.Limit{Rate: lim.Count, Burst: lim.Count, Period: lim.Period}
}

// redisRateKeyPrefix is what redis_rate puts before every key it keeps.
const redisRateKeyPrefix = "rate:"

// refundScript moves a redis_rate GCRA key's theoretical arrival time back
// by one emission interval, deleting the key when nothing is owed any more.
// It reads the clock as redis_rate's script does (seconds since 2017-01-01,
// from TIME), so the two agree. redis_rate itself cannot do this: a
// negative cost that brings the key below "now" is not written back.
var refundScript = redis.NewScript(`
redis.replicate_commands()
local tat = redis.call("GET", KEYS[1])
if not tat then return 0 end
local now = redis.call("TIME")
now = (now[1] - 1483228800) + (now[2] / 1000000)
local new_tat = tonumber(tat) - tonumber(ARGV[1])
if new_tat <= now then
  redis.call("DEL", KEYS[1])
else
  redis.call("SET", KEYS[1], new_tat, "EX", math.ceil(new_tat - now))
end
return 1
`)

func (l *Limiter) refundRedis(ctx context.Context, key string, lim Limit) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	err := refundScript.Run(ctx, l.rdb, []string{redisRateKeyPrefix + l.prefix + key}, lim.interval().Seconds()).Err()
	if err != nil {
		// The event stays counted: the safe side of a lost refund.
		l.log.DebugContext(ctx, "rate limit refund lost", "err", err)
	}
}

func (l *Limiter) reserveLocal(key string, lim Limit) (time.Duration, func(context.Context)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	counters, ok := l.local[lim.Name]
	if !ok {
		counters, _ = lru.New[string, *gcra](localKeys) // only fails for a size below one
		l.local[lim.Name] = counters
	}
	g, ok := counters.Get(key)
	if !ok {
		g = &gcra{}
		counters.Add(key, g)
	}
	now := time.Now()
	if wait := g.reserve(now, lim); wait > 0 {
		return wait, noRefund
	}
	return 0, func(context.Context) {
		l.mu.Lock()
		defer l.mu.Unlock()
		g.tat = g.tat.Add(-lim.interval())
	}
}

// gcra is the in-process twin of redis_rate's counter: the theoretical
// arrival time of the next event, advanced one emission interval per
// event, allowing Count events at once.
type gcra struct{ tat time.Time }

func (g *gcra) reserve(now time.Time, lim Limit) time.Duration {
	tat := g.tat
	if tat.Before(now) {
		tat = now
	}
	next := tat.Add(lim.interval())
	allowAt := next.Add(-lim.interval() * time.Duration(lim.Count)) // the burst, as redis_rate counts it
	if now.Before(allowAt) {
		return allowAt.Sub(now)
	}
	g.tat = next
	return 0
}
