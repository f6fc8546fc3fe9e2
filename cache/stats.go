package cache

import "sync/atomic"

// Stats are the cache's counters at one moment, for operators (/stats and
// /metrics) and tests. Counters only grow.
type Stats struct {
	// Hits are reads answered by a fresh cached listing, from any tier.
	Hits uint64 `json:"hits"`
	// Misses are reads answered by a listing loaded from the store.
	Misses uint64 `json:"misses"`
	// Stale are reads answered by an old copy while the store failed.
	Stale uint64 `json:"stale"`
	// StoreLoads are the store reads of shared misses, one per flight.
	StoreLoads uint64 `json:"storeLoads"`
	// TierErrors are failed operations on the shared tier, the breaker's
	// refusals included.
	TierErrors uint64 `json:"tierErrors"`
	// Corrupt are tier values that were unreadable or another key's; each
	// read of one was a miss.
	Corrupt uint64 `json:"corrupt"`
	// Incoherent counts keys that a write could neither update nor
	// remove; they may serve the old version until they stop being fresh.
	Incoherent uint64 `json:"incoherent"`
	// LocalHits are the hits answered by the local tier in front of Redis.
	LocalHits uint64 `json:"localHits"`
	// TierHits are the hits answered by Redis (or, without Redis, by the
	// in-process tier after a first look missed it).
	TierHits uint64 `json:"tierHits"`
	// Negative are reads answered by a cached "no such listing".
	Negative uint64 `json:"negative"`
	// Shared are reads that joined another's load of the same key.
	Shared uint64 `json:"shared"`
	// LocalTierOn is whether that tier serves: it has a live subscription.
	LocalTierOn bool `json:"localTierOn"`
	// RedisTrusted is whether Redis entries are served without a check
	// (see trust.go); always true without Redis or a change feed.
	RedisTrusted bool `json:"redisTrusted"`
	// Announced counts the writes announced to other gateways.
	Announced uint64 `json:"announced"`
	// Unacknowledged are the announced writes not acknowledged by every
	// subscribed gateway within the wait.
	Unacknowledged uint64 `json:"unacknowledged"`
	// Compressed counts the versions' bodies compressed here, one per
	// version and coding that a request asked for first (variants.go).
	Compressed uint64 `json:"compressed"`
	// Coalesced are the flights that another gateway's load answered:
	// they found its lease on the cold key and waited for its fill.
	Coalesced uint64 `json:"coalesced"`
}

// counters are the live counts of a Cache, one for each counter of Stats
// under the same name (joined counts Shared: a joined flight, not the
// shared tier). Announced and Unacknowledged are the invalidator's.
type counters struct {
	hits, misses, stale, storeLoads, tierErrors, corrupt, incoherent atomic.Uint64
	localHits, tierHits, negative, joined, compressed, coalesced     atomic.Uint64
}

// snapshot reads the counters into a Stats; each is read on its own, so a
// snapshot taken under load need not add up exactly.
func (n *counters) snapshot() Stats {
	return Stats{
		Hits: n.hits.Load(), Misses: n.misses.Load(), Stale: n.stale.Load(),
		StoreLoads: n.storeLoads.Load(), TierErrors: n.tierErrors.Load(), Corrupt: n.corrupt.Load(),
		Incoherent: n.incoherent.Load(), LocalHits: n.localHits.Load(), TierHits: n.tierHits.Load(),
		Negative: n.negative.Load(), Shared: n.joined.Load(), Compressed: n.compressed.Load(),
		Coalesced: n.coalesced.Load(),
	}
}

// Stats returns the counters so far.
func (c *Cache) Stats() Stats {
	s := c.counts.snapshot()
	s.LocalTierOn = c.front != nil && c.front.serving()
	s.RedisTrusted = c.RedisTrusted()
	if c.inv != nil {
		s.Announced, s.Unacknowledged = c.inv.announced.Load(), c.inv.unacknowledged.Load()
	}
	return s
}
