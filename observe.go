package main

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/breaker"
	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/cdn"
	"github.com/realty-gateway/gateway/feed"
	"github.com/realty-gateway/gateway/internal/adminserver"
	"github.com/realty-gateway/gateway/metrics"
	"github.com/realty-gateway/gateway/ratelimit"
	"github.com/realty-gateway/gateway/revocation"
	"github.com/realty-gateway/gateway/upstream"
)

// newMetrics has m read the components' own counters and breaker states
// at scrape time; purger and rdb may be nil.
// changes may be nil too; revocations is the token revocations' keeper.
// localBudget is the local tier's byte bound
// (GATEWAY_LOCAL_CACHE_BYTES); ready is asked at each scrape, as /readyz
// asks it.
func newMetrics(m *metrics.Metrics, listings *cache.Cache, guarded *upstream.Guarded, limiter *ratelimit.Limiter, purger *cdn.Purger, rdb redis.UniversalClient,
	changes *feed.Consumer, revocations *revocation.Keeper, localBudget int64, ready adminserver.Readiness) {
	m.GaugeFunc("gateway_ready", "1 while /readyz would answer 204, else 0 (draining, warming up, or store and cache both failing).", nil,
		func() float64 { return boolGauge(ready.Check(context.Background()) == "") })
	m.GaugeFunc("gateway_cache_local_budget_bytes", "Bytes of listings the in-process tier may hold (GATEWAY_LOCAL_CACHE_BYTES).", nil,
		func() float64 { return float64(localBudget) })
	observeCacheReads(m, listings, rdb != nil)
	m.CounterFunc("gateway_singleflight_shared_total", "Reads that joined another read's load of the same listing.", nil,
		func() float64 { return float64(listings.Stats().Shared) })
	for scope, read := range map[string]func(cache.Stats) uint64{
		"process": func(s cache.Stats) uint64 { return s.Shared },
		"fleet":   func(s cache.Stats) uint64 { return s.Coalesced },
	} {
		m.CounterFunc("gateway_cache_coalesced_total", "Reads answered by another read's load of the same listing: in this process, or on the gateway that held the cold key's lease in Redis.",
			prometheus.Labels{"scope": scope}, func() float64 { return float64(read(listings.Stats())) })
	}
	breakers := map[string]func() breaker.State{"store": guarded.BreakerState, "redis": listings.TierBreakerState, "limiter": limiter.BreakerState}
	if purger != nil {
		// purge: the queue's (retries, repeats, the change feed's purges);
		// purge-sync: the writes' synchronous purges', closed without sync.
		breakers["purge"], breakers["purge-sync"] = purger.BreakerState, purger.SyncBreakerState
		observePurger(m, purger)
	}
	for name, state := range breakers {
		m.GaugeFunc("gateway_breaker_state", "Breaker state: 0 closed, 1 half-open, 2 open.",
			prometheus.Labels{"breaker": name}, func() float64 { return float64(state()) })
	}
	if rdb != nil {
		observeRedis(m, listings, rdb, localBudget > 0)
	}
	observeFeed(m, changes)
	observeRevocations(m, revocations)
}

// observeCacheReads exports the listing reads by tier and result.
func observeCacheReads(m *metrics.Metrics, listings *cache.Cache, withRedis bool) {
	type line struct {
		tier, result string
		read         func(cache.Stats) uint64
	}
	lines := []line{ // without Redis every read is the process's own
		{"local", "hit", func(s cache.Stats) uint64 { return s.Hits }},
		{"local", "miss", func(s cache.Stats) uint64 { return s.Misses }},
		{"local", "stale", func(s cache.Stats) uint64 { return s.Stale }},
		{"local", "negative", func(s cache.Stats) uint64 { return s.Negative }},
	}
	if withRedis {
		lines = []line{
			{"local", "hit", func(s cache.Stats) uint64 { return s.LocalHits }},
			{"redis", "hit", func(s cache.Stats) uint64 { return s.TierHits }},
			{"redis", "miss", func(s cache.Stats) uint64 { return s.Misses }},
			{"redis", "stale", func(s cache.Stats) uint64 { return s.Stale }},
			{"redis", "negative", func(s cache.Stats) uint64 { return s.Negative }},
		}
	}
	for _, l := range lines {
		m.CounterFunc("gateway_cache_requests_total", "Listing reads by cache tier and result.",
			prometheus.Labels{"tier": l.tier, "result": l.result}, func() float64 { return float64(l.read(listings.Stats())) })
	}
}

// observePurger exports the CDN purges' outcomes and queue.
func observePurger(m *metrics.Metrics, purger *cdn.Purger) {
	for outcome, read := range map[string]func() uint64{"sent": purger.Sent, "failed": purger.Failed, "dropped": purger.Dropped} {
		m.CounterFunc("gateway_purges_total", "CDN purge requests by outcome: sent, failed (an attempt), dropped (given up).",
			prometheus.Labels{"outcome": outcome}, func() float64 { return float64(read()) })
	}
	m.GaugeFunc("gateway_purges_pending", "CDN purges waiting to be delivered: queued, or retried after failures.", nil,
		func() float64 { return float64(purger.Pending()) })
}

// observeRedis exports the cache's Redis tier: its errors, the
// announcements to the other replicas, the local tier in front of it
// where there is one, the connection pool and whether it is trusted.
func observeRedis(m *metrics.Metrics, listings *cache.Cache, rdb redis.UniversalClient, localTier bool) {
	m.CounterFunc("gateway_cache_redis_errors_total", "Redis operations of the cache that failed, the breaker's refusals included.", nil,
		func() float64 { return float64(listings.Stats().TierErrors) })
	m.CounterFunc("gateway_cache_announcements_total", "Writes announced to the other replicas' local tiers.", nil,
		func() float64 { return float64(listings.Stats().Announced) })
	m.CounterFunc("gateway_cache_announcements_unacknowledged_total",
		"Announced writes not acknowledged by every subscribed replica within GATEWAY_INVALIDATION_WAIT.", nil,
		func() float64 { return float64(listings.Stats().Unacknowledged) })
	if localTier {
		m.GaugeFunc("gateway_cache_local_tier_on", "1 while the local tier in front of Redis serves (its subscription is live), else 0.", nil,
			func() float64 { return boolGauge(listings.Stats().LocalTierOn) })
	}
	for name, read := range map[string]func(*redis.PoolStats) uint32{
		"hits": func(s *redis.PoolStats) uint32 { return s.Hits }, "misses": func(s *redis.PoolStats) uint32 { return s.Misses },
		"timeouts": func(s *redis.PoolStats) uint32 { return s.Timeouts }, "total_conns": func(s *redis.PoolStats) uint32 { return s.TotalConns },
		"idle_conns": func(s *redis.PoolStats) uint32 { return s.IdleConns }, "stale_conns": func(s *redis.PoolStats) uint32 { return s.StaleConns },
	} {
		m.GaugeFunc("gateway_redis_pool_"+name, "go-redis connection pool statistic.",
			prometheus.Labels{"pool": "redis"}, func() float64 { return float64(read(rdb.PoolStats())) })
	}
	m.GaugeFunc("gateway_cache_redis_trusted", "1 while Redis entries are served; 0 after signs that Redis missed writes, until the change feed has applied them.", nil,
		func() float64 { return boolGauge(listings.RedisTrusted()) })
}

// observeRevocations exports the token revocations in force and the
// failed polls of the store's.
func observeRevocations(m *metrics.Metrics, revocations *revocation.Keeper) {
	m.GaugeFunc("gateway_revocations_in_force", "Token revocations this gateway applies (younger than the token lifetime plus the leeway).", nil,
		func() float64 { return float64(revocations.Stats().InForce) })
	m.CounterFunc("gateway_revocation_poll_failures_total", "Reads of the store's token revocations that failed; meanwhile new ones arrive only through Redis.", nil,
		func() float64 { return float64(revocations.Stats().PollFailures) })
}

// observeFeed exports the change feed consumer's state.
func observeFeed(m *metrics.Metrics, c *feed.Consumer) {
	m.GaugeFunc("gateway_feed_consumer", "1 on the gateway that consumes the store's change feed.", nil,
		func() float64 { return boolGauge(c.Stats().Consumer) })
	m.GaugeFunc("gateway_feed_backlog_rows", "Changes not yet applied (read by the consumer; 0 elsewhere).", nil,
		func() float64 { return float64(c.Stats().Backlog) })
	m.GaugeFunc("gateway_feed_lag_seconds", "Age of the oldest change not yet applied, by the database's clock (read by the consumer; 0 elsewhere).", nil,
		func() float64 { return c.Stats().Lag.Seconds() })
	m.CounterFunc("gateway_feed_changes_applied_total", "Changes applied to every cache tier by this gateway.", nil,
		func() float64 { return float64(c.Stats().Applied) })
	m.CounterFunc("gateway_feed_changes_replayed_total", "Changes marked for applying again to a Redis that may have lost them.", nil,
		func() float64 { return float64(c.Stats().Replayed) })
	m.CounterFunc("gateway_feed_first_versions_unpurged_total", "Listings whose change was their first version (an insert, an import): applied without a CDN purge, since no edge has seen them.", nil,
		func() float64 { return float64(c.Stats().Unpurged) })
	m.CounterFunc("gateway_feed_purges_given_up_total", "Changes marked done though their CDN purge was given up.", nil,
		func() float64 { return float64(c.Stats().PurgesGivenUp) })
	for _, stage := range []string{feed.StageStore, feed.StageRedis, feed.StageAnnounce, feed.StagePurge} {
		m.CounterFunc("gateway_feed_errors_total", "Change feed failures by stage: store, redis, announce, purge.",
			prometheus.Labels{"stage": stage}, func() float64 { return float64(c.Stats().Errors[stage]) })
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
