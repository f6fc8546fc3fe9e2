package ratelimit

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/testenv"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func redisClient(t *testing.T, addr string) (*redis.Client, string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	prefix := testenv.RandomName("rl") + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		if keys, _ := rdb.Keys(ctx, "rate:"+prefix+"*").Result(); len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
		rdb.Close()
	})
	return rdb, prefix
}

func TestLimits(t *testing.T) {
	lim := Limit{Count: 3, Period: time.Hour}
	tests := []struct {
		name string
		give func(t *testing.T) (*Limiter, *Limiter) // two gateways
	}{
		{name: "shared in Redis", give: func(t *testing.T) (*Limiter, *Limiter) {
			rdb, prefix := redisClient(t, testenv.RedisOrStandIn(t))
			return New(rdb, prefix, time.Second, quiet()), New(rdb, prefix, time.Second, quiet())
		}},
		{name: "in process while Redis is down", give: func(t *testing.T) (*Limiter, *Limiter) {
			rdb, prefix := redisClient(t, "127.0.0.1:1") // nothing listens there
			l := New(rdb, prefix, 50*time.Millisecond, quiet())
			return l, l
		}},
		{name: "in process without Redis", give: func(t *testing.T) (*Limiter, *Limiter) {
			l := New(nil, "", time.Second, quiet())
			return l, l
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := tt.give(t)
			ctx := context.Background()
			if wait := a.Check(ctx, "k", lim); wait != 0 {
				t.Fatalf("fresh key checked as limited (%v)", wait)
			}
			for i := range 3 {
				l := a
				if i%2 == 1 {
					l = b
				}
				if wait := l.Take(ctx, "k", lim); wait != 0 {
					t.Fatalf("event %d refused (%v)", i, wait)
				}
			}
			if wait := b.Check(ctx, "k", lim); wait <= 0 {
				t.Fatal("exhausted key checked as free")
			}
			if wait := a.Take(ctx, "k", lim); wait <= 0 || wait > time.Hour {
				t.Fatalf("fourth event: wait %v, want refused within the period", wait)
			}
			if wait := a.Take(ctx, "other", lim); wait != 0 {
				t.Fatalf("another key is limited (%v)", wait)
			}
		})
	}
}
