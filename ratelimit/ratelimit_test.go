package ratelimit

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/testenv"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newLimiter returns a Limiter on rdb, failing t if there is none.
func newLimiter(t *testing.T, rdb redis.UniversalClient, prefix string, timeout time.Duration) *Limiter {
	t.Helper()
	l, err := New(rdb, prefix, timeout, quiet())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

// TestNewRefusesBadSettings: New names what it refuses.
func TestNewRefusesBadSettings(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	tests := []struct {
		name     string
		rdb      redis.UniversalClient
		timeout  time.Duration
		log      *slog.Logger
		wantText string
	}{
		{name: "no log", timeout: time.Second, wantText: "log"},
		{name: "no redis timeout", rdb: rdb, log: quiet(), wantText: "redis timeout"},
		{name: "negative redis timeout", rdb: rdb, timeout: -time.Second, log: quiet(), wantText: "redis timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.rdb, "", tt.timeout, tt.log); err == nil || !strings.Contains(err.Error(), tt.wantText) {
				t.Fatalf("error %v; want one naming %s", err, tt.wantText)
			}
		})
	}
	if _, err := New(nil, "", 0, quiet()); err != nil {
		t.Fatalf("New without Redis needs no timeout: %v", err)
	}
}

func redisClient(t *testing.T, addr string) (*redis.Client, string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	prefix := testenv.RandomName("rl") + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		_ = testenv.DeleteKeys(ctx, rdb, "rate:"+prefix+"*")
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
			return newLimiter(t, rdb, prefix, time.Second), newLimiter(t, rdb, prefix, time.Second)
		}},
		{name: "in process while Redis is down", give: func(t *testing.T) (*Limiter, *Limiter) {
			rdb, prefix := redisClient(t, "127.0.0.1:1") // nothing listens there
			l := newLimiter(t, rdb, prefix, 50*time.Millisecond)
			return l, l
		}},
		{name: "in process without Redis", give: func(t *testing.T) (*Limiter, *Limiter) {
			l := newLimiter(t, nil, "", time.Second)
			return l, l
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := tt.give(t)
			ctx := context.Background()
			for i := range 3 {
				l := a
				if i%2 == 1 {
					l = b
				}
				if wait := l.Take(ctx, "k", lim); wait != 0 {
					t.Fatalf("event %d refused (%v)", i, wait)
				}
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

// TestRefundGivesTheEventBack reserves up to the limit, refunds, and expects
// exactly the refunded events to be allowed again, on every backend.
func TestRefundGivesTheEventBack(t *testing.T) {
	lim := Limit{Name: "refund", Count: 3, Period: time.Hour}
	for name, give := range backends() {
		t.Run(name, func(t *testing.T) {
			l := give(t)
			ctx := context.Background()
			var refunds []func(context.Context)
			for i := range 3 {
				wait, refund := l.Reserve(ctx, "k", lim)
				if wait != 0 {
					t.Fatalf("reservation %d refused (%v)", i, wait)
				}
				refunds = append(refunds, refund)
			}
			if wait, _ := l.Reserve(ctx, "k", lim); wait <= 0 {
				t.Fatal("fourth reservation allowed")
			}
			refunds[0](ctx)
			refunds[1](ctx)
			for i := range 2 {
				if wait, _ := l.Reserve(ctx, "k", lim); wait != 0 {
					t.Fatalf("reservation %d after two refunds refused (%v)", i, wait)
				}
			}
			if wait, _ := l.Reserve(ctx, "k", lim); wait <= 0 {
				t.Fatal("a third reservation after two refunds allowed")
			}
		})
	}
}

// TestRefundOfTheOnlyEventClearsTheKey is the case redis_rate's negative
// cost gets wrong: one event, refunded, must leave nothing owed.
func TestRefundOfTheOnlyEventClearsTheKey(t *testing.T) {
	lim := Limit{Name: "single", Count: 1, Period: time.Hour}
	for name, give := range backends() {
		t.Run(name, func(t *testing.T) {
			l := give(t)
			ctx := context.Background()
			for i := range 5 {
				wait, refund := l.Reserve(ctx, "k", lim)
				if wait != 0 {
					t.Fatalf("round %d: refused (%v) after the previous event was refunded", i, wait)
				}
				refund(ctx)
			}
		})
	}
}

// TestParallelReservationsCannotOvertakeTheLimit is the account-limit race:
// every reservation counts before any outcome is known.
func TestParallelReservationsCannotOvertakeTheLimit(t *testing.T) {
	lim := Limit{Name: "race", Count: 20, Period: time.Hour}
	for name, give := range backends() {
		t.Run(name, func(t *testing.T) {
			l := give(t)
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for range 120 {
				wg.Go(func() {
					if wait, _ := l.Reserve(context.Background(), "acct", lim); wait == 0 {
						allowed.Add(1)
					}
				})
			}
			wg.Wait()
			if got := allowed.Load(); got != 20 {
				t.Fatalf("%d of 120 parallel reservations allowed, want 20", got)
			}
		})
	}
}

// TestJunkUnderOneLimitDoesNotEvictAnother fills one limit's in-process
// counters far past their bound and expects another limit's counter to
// survive.
func TestJunkUnderOneLimitDoesNotEvictAnother(t *testing.T) {
	l := newLimiter(t, nil, "", time.Second)
	ctx := context.Background()
	account := Limit{Name: "account", Count: 1, Period: time.Hour}
	junk := Limit{Name: "ip", Count: 1, Period: time.Hour}
	if wait := l.Take(ctx, "victim", account); wait != 0 {
		t.Fatal(wait)
	}
	for i := range localKeys + 10 {
		l.Take(ctx, "junk"+strconv.Itoa(i), junk)
	}
	if wait := l.Take(ctx, "victim", account); wait <= 0 {
		t.Fatal("the account's counter was evicted by junk under another limit")
	}
}

func backends() map[string]func(t *testing.T) *Limiter {
	return map[string]func(t *testing.T) *Limiter{
		"redis": func(t *testing.T) *Limiter {
			rdb, prefix := redisClient(t, testenv.RedisOrStandIn(t))
			return newLimiter(t, rdb, prefix, time.Second)
		},
		"in process": func(t *testing.T) *Limiter { return newLimiter(t, nil, "", time.Second) },
	}
}
