package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/internal/gatewaytest"
)

// cacheStats reads the cache counters of the gateways (their /stats),
// summed; servers without an admin listener count nothing.
func cacheStats(servers ...*server) (cache.Stats, error) {
	var sum cache.Stats
	for _, s := range servers {
		if s.admin == "" {
			continue
		}
		st, err := (&gatewaytest.Process{AdminBase: "http://" + s.admin}).ReadStats()
		if err != nil {
			return sum, err
		}
		c := st.Cache
		sum.Hits += c.Hits
		sum.Misses += c.Misses
		sum.Stale += c.Stale
		sum.StoreLoads += c.StoreLoads
		sum.TierErrors += c.TierErrors
		sum.LocalHits += c.LocalHits
		sum.TierHits += c.TierHits
		sum.Negative += c.Negative
		sum.Shared += c.Shared
		sum.Coalesced += c.Coalesced
		sum.RedisTrusted = c.RedisTrusted // of the last
		sum.LocalTierOn = c.LocalTierOn
	}
	return sum, nil
}

// tiers is where a run's reads were answered, from the counters' growth.
type tiers struct {
	local, redis, store, stale, other, loads uint64
	// process: without Redis every hit is the process's own
	redisless bool
}

func tiersOf(before, after cache.Stats, redisless bool) tiers {
	t := tiers{
		local: after.LocalHits - before.LocalHits, redis: after.TierHits - before.TierHits,
		store: after.Misses - before.Misses, stale: after.Stale - before.Stale,
		loads: after.StoreLoads - before.StoreLoads, redisless: redisless,
	}
	if redisless { // LocalHits and TierHits count the tier in front of Redis
		t.local, t.redis = after.Hits-before.Hits, 0
	}
	t.other = after.Negative - before.Negative
	return t
}

func (t tiers) total() uint64 { return t.local + t.redis + t.store + t.stale + t.other }

// shares prints the shares of the local tier, Redis and the store.
func (t tiers) shares() (local, redis, store float64) {
	n := float64(t.total())
	if n == 0 {
		return 0, 0, 0
	}
	return float64(t.local) / n, float64(t.redis) / n, float64(t.store+t.stale) / n
}

// feedSettleWait bounds awaitFeedDrained.
const feedSettleWait = 5 * time.Minute

// awaitFeedDrained waits, at most within, until the change feed's
// consumer has no backlog (the seed's import leaves one), has kept the
// response body of every listing in PostgreSQL (its backfill: until then
// a miss encodes the document, and the backfill itself costs the
// consumer's process CPU), every gateway with Redis trusts it, and every
// server idles (an earlier release's backfill of what this one's sees as
// kept), so that no run measures the consumer
// catching up, or a gateway that serves no Redis entry. It reports what
// it waited for where the time ran out.
func (l *lab) awaitFeedDrained(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		pending := ""
		for _, s := range l.servers {
			if s.admin == "" {
				continue
			}
			st, err := (&gatewaytest.Process{AdminBase: "http://" + s.admin}).ReadStats()
			switch {
			case err != nil:
				pending = fmt.Sprintf("%s: %v", s.name, err)
			case st.Feed.Consumer && st.Feed.Backlog > 0:
				pending = fmt.Sprintf("%s: a backlog of %d changes", s.name, st.Feed.Backlog)
			case !s.redisless && !st.Cache.RedisTrusted:
				pending = fmt.Sprintf("%s: Redis not trusted yet", s.name)
			}
		}
		if pending == "" {
			pending = l.bodiesPending(ctx)
		}
		if pending == "" {
			pending = l.busyServer()
		}
		if pending == "" {
			return nil
		}
		if time.Now().After(deadline) {
			log.Printf("the change feed did not settle within %v (%s); measuring anyway", within, pending)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// bodiesPending says how many of the run database's listings lack a kept
// body, or "" where none does (or there is no run database).
func (l *lab) bodiesPending(ctx context.Context) string {
	if l.dbURL == "" {
		return ""
	}
	db, err := pgx.Connect(ctx, l.dbURL)
	if err != nil {
		return err.Error()
	}
	defer db.Close(ctx)
	var n int64
	err = db.QueryRow(ctx, `SELECT count(*) FROM listings WHERE NOT deleted
		AND (CASE WHEN body_revision = revision OR document_body_revision = revision THEN etag END) IS NULL`).Scan(&n)
	switch {
	case err != nil:
		return "" // a release before kept bodies has nothing to wait for
	case n > 0:
		return fmt.Sprintf("%d listings without a kept body", n)
	}
	return ""
}

// busyServer names a server that used more than 2 % of a core over the
// last second, or "".
func (l *lab) busyServer() string {
	before := map[*server]float64{}
	for _, s := range l.servers {
		before[s] = cpuSeconds(s.cmd.Process.Pid)
	}
	time.Sleep(time.Second)
	for s, t := range before {
		if used := cpuSeconds(s.cmd.Process.Pid) - t; used > 0.02 {
			return fmt.Sprintf("%s: %.0f %% of a core while idle", s.name, 100*used)
		}
	}
	return ""
}
