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
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"golang.org/x/time/rate"

	"github.com/realty-gateway/gateway/upstream"
)

// Limit allows Count events per Period, all of them at once if need be.
type Limit struct {
	Count  int
	Period time.Duration
}

// Limiter checks and counts events per key.
type Limiter struct {
	redis   *redis_rate.Limiter // nil without Redis
	cb      *gobreaker.CircuitBreaker[*redis_rate.Result]
	prefix  string
	timeout time.Duration
	log     *slog.Logger

	mu       sync.Mutex
	local    *lru.Cache[string, *rate.Limiter]
	degraded atomic.Bool
}

// localKeys bounds the in-process limiter's memory.
const localKeys = 100_000

// New returns a Limiter on rdb, or in process only when rdb is nil. Each
// Redis call is bounded by timeout.
func New(rdb *redis.Client, prefix string, timeout time.Duration, log *slog.Logger) *Limiter {
	local, err := lru.New[string, *rate.Limiter](localKeys)
	if err != nil {
		panic(err) // only for a size below one
	}
	l := &Limiter{prefix: prefix, timeout: timeout, log: log, local: local}
	if rdb != nil {
		l.redis = redis_rate.NewLimiter(rdb)
		l.cb = gobreaker.NewCircuitBreaker[*redis_rate.Result](upstream.FastFail("ratelimit-redis", log))
	}
	return l
}

// Take counts one event under key and returns how long to wait before
// another is allowed: zero when this one is allowed.
func (l *Limiter) Take(ctx context.Context, key string, lim Limit) time.Duration {
	return l.allowN(ctx, key, lim, 1)
}

// Check returns how long to wait before an event under key is allowed,
// without counting one.
func (l *Limiter) Check(ctx context.Context, key string, lim Limit) time.Duration {
	return l.allowN(ctx, key, lim, 0)
}

func (l *Limiter) allowN(ctx context.Context, key string, lim Limit, n int) time.Duration {
	if l.redis != nil {
		res, err := l.cb.Execute(func() (*redis_rate.Result, error) {
			ctx, cancel := context.WithTimeout(ctx, l.timeout)
			defer cancel()
			return l.redis.AllowN(ctx, l.prefix+key, redisLimit(lim), n)
		})
		if err == nil {
			if l.degraded.CompareAndSwap(true, false) {
				l.log.Info("rate limits back on Redis")
			}
			if n == 0 && res.Remaining == 0 {
				// A peek reports no wait; the next event frees up after
				// one emission interval at most.
				return lim.Period / time.Duration(lim.Count)
			}
			return max(res.RetryAfter, 0)
		}
		if l.degraded.CompareAndSwap(false, true) {
			l.log.Warn("rate limits falling back to this process", "err", err)
		}
	}
	return l.allowLocal(key, lim, n)
}

func redisLimit(lim Limit) redis_rate.Limit {
	return redis_rate.Limit{Rate: lim.Count, Burst: lim.Count, Period: lim.Period}
}

func (l *Limiter) allowLocal(key string, lim Limit, n int) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	rl, ok := l.local.Get(key)
	if !ok {
		rl = rate.NewLimiter(rate.Every(lim.Period/time.Duration(lim.Count)), lim.Count)
		l.local.Add(key, rl)
	}
	now := time.Now()
	r := rl.ReserveN(now, 1)
	d := r.DelayFrom(now)
	if n == 0 || d > 0 {
		r.CancelAt(now) // a peek, or refused: count nothing
	}
	return d
}
