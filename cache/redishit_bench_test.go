package cache

import (
	"context"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/coding"
)

// BenchmarkRedisHit is a hit that Redis answers (no local tier), on a
// running cache, as a gateway with GATEWAY_LOCAL_CACHE_BYTES=0 serves it,
// or one whose local copy aged out.
func BenchmarkRedisHit(b *testing.B) {
	rdb, prefix := redisFor(b)
	cfg := testConfig()
	cfg.LocalBytes = 0
	c := must(b)(NewRedis(rdb, testRedisTimeout, cfg, testDeps(newSource(fullListing()), prefix)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	<-c.Subscribed()
	if _, err := c.Get(ctx, ByID(77), coding.Identity, time.Now()); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if e, err := c.Get(ctx, ByID(77), coding.Identity, time.Now()); err != nil || e.State != Hit {
			b.Fatal(e.State, err)
		}
	}
}
