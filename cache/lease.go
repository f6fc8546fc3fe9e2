package cache

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A cold key costs the store one read for the whole fleet, not one per
// gateway (Facebook's memcache leases, NSDI '13):
//   - the flight's look at an empty key takes its lease in the same script
//     (getOrLease), so no fill lands between the look and the lease;
//   - only the holder reads the store; its fill ends the lease and, where
//     a gateway marked the lease waited for, publishes the key on the
//     filled channel (guardedSetRelease), in the same round trip;
//   - a gateway that finds the lease taken marks it and waits for that
//     message, looking again every leasePoll in case it is lost, and
//     answers from the fill, admitted as any copy is;
//   - a write of the key, or a change the feed applies, ends the lease and
//     wakes its waiters; fills stay version-guarded throughout.

// Bounds: a lease lives the load timeout, so a dead holder holds the key
// at most that long, and a waiter waits at most that long before it loads
// by itself; a holder whose store failed releases at once. A look that
// fails takes no lease and waits for none. While Redis is not trusted, or
// this process does not hear the other gateways, no lease is taken.

// leasePoll is how often a waiter looks at Redis without a message.
const leasePoll = 50 * time.Millisecond

// hold is a lease this process may take or holds on the key name; the
// zero hold takes none. Its lease key and token are spelled only where a
// look finds the key empty: a hit allocates nothing for them.
type hold struct {
	name, owner string
	seq         uint64
}

// leaseState is what a look at an empty key did with its lease.
type leaseState uint8

const (
	noLease            leaseState = iota // none asked for, or the look failed: load without one
	leaseTaken                           // this look took it: load, and the fill ends it
	leaseHeldElsewhere                   // another gateway holds it: wait for its fill
)

// none reports whether h takes no lease.
func (h hold) none() bool { return h.seq == 0 }

// lease is the key that holds h's lease.
func (h hold) lease() string { return leaseKey(h.name) }

// token is h's value in its lease key. The dot ends it: no token is the
// start of another's.
func (h hold) token() string { return h.owner + "-" + strconv.FormatUint(h.seq, 36) + "." }

// leaseKey names the lease of the key name in name's Redis Cluster slot:
// name's own hash tag where it has one, else all of name as the tag; ""
// where no key shares name's slot for certain (a brace without a tag).
func leaseKey(name string) string {
	switch tagged, ok := hashTagged(name); {
	case !ok:
		return ""
	case tagged:
		return name + ":lease"
	}
	return "{" + name + "}:lease"
}

// hashTagged reports whether name has a Redis Cluster hash tag, and ok
// where a lease key can share its slot: not where a brace opens no tag.
func hashTagged(name string) (tagged, ok bool) {
	i := strings.IndexByte(name, '{')
	switch {
	case i < 0 && !strings.Contains(name, "}"):
		return false, true
	case i >= 0 && strings.IndexByte(name[i+1:], '}') > 0:
		return true, true
	}
	return false, false
}

// newHold is the lease this flight may take on name: none without a fleet
// to share it with, or while coalescing across gateways is off.
func (c *Cache) newHold(name string) hold {
	if _, ok := hashTagged(name); c.inv == nil || !ok || !c.shareFlights() {
		return hold{}
	}
	return hold{name: name, owner: c.inv.id, seq: c.inv.seq.Add(1)}
}

// coldLooks tells, from this process's recent looks at Redis, whether keys
// are mostly found empty (a burst of cold keys, a flushed Redis), where
// the lease rides on the read (getOrLease: one round trip), or mostly
// found, where a plain GET reads them and only an empty key costs a
// second round trip for its lease: a GET costs Redis, which the whole
// fleet shares, a fraction of the script's CPU (docs/performance.md).
type coldLooks struct{ score atomic.Int32 }

// coldLooksSpan bounds the score: the policy follows a change of traffic
// within this many looks.
const coldLooksSpan = 8

// mostlyEmpty reports whether the recent looks found keys empty at least
// as often as not; a new process presumes so.
func (l *coldLooks) mostlyEmpty() bool { return l.score.Load() >= 0 }

// saw counts a look that found its key empty or not. At the bound it
// writes nothing, so that steady traffic does not contend on the score.
func (l *coldLooks) saw(empty bool) {
	d, bound := int32(-1), int32(-coldLooksSpan)
	if empty {
		d, bound = 1, coldLooksSpan
	}
	if l.score.Load() != bound {
		l.score.Add(d)
	}
}

// releaseLease ends the lease the miss still holds, if any, without a
// fill: its store read failed, or its fill did not write the lease's key.
// Deferred by the flight, it is the one place a miss's lease is released.
func (m *miss) releaseLease() {
	m.c.release(m.hold)
	m.hold = hold{}
}

// release ends h, if this process holds it, without a fill.
func (c *Cache) release(h hold) {
	if c.redis != nil {
		c.redis.release(h)
	}
}

// release ends h without a fill (the holder's store failed) and tells the
// waiting gateways. Best effort, without waiting: a lost release costs the
// waiters their poll, or the lease its expiry.
func (t *redisTier) release(h hold) {
	if h.none() || t.pipe == nil {
		return
	}
	ctx := context.Background()
	cmd := redis.NewCmd(ctx, "eval", releaseLease.src, 2, h.name, h.lease(), h.token(), t.filled)
	cmd.SetFirstKeyPos(3) // the key's and its lease's slot, on a cluster
	t.pipe.Submit(ctx, cmd)
}

// awaitFill waits, at most the load timeout, for the fill of the gateway
// that holds the lease on the miss's cold key, and admits it; it takes
// the lease where the holder's has expired. It returns missing, with the
// miss holding the lease where this process took it, where the key is
// still to load here. Each look follows the watch it waits on: a fill
// announced before the watch began is seen by the look, one after it ends
// the wait.
func (m *miss) awaitFill(ctx context.Context) look {
	c := m.c
	ctx, cancel := context.WithTimeout(ctx, c.loadTimeout)
	defer cancel()
	for announced := false; ; {
		filled, stop := c.inv.watchFill(m.name)
		found := c.readShared(ctx, m.k, m.name, m.hold)
		switch {
		case found.lease == leaseTaken: // the holder's lease expired: this one loads
			stop()
			return found
		case found.v == admitted || found.v == absent:
			stop()
			c.counts.coalesced.Add(1)
			found.collapsed = found.v == admitted
			m.hold = hold{}
			return found
		case found.lease != leaseHeldElsewhere, announced:
			// Not servable, a look that failed, or released without a
			// fill (the holder's store failed): load as before, not one
			// gateway after another.
			stop()
			m.hold = hold{}
			return found
		}
		select {
		case <-filled:
			announced = true
		case <-time.After(leasePoll):
		case <-ctx.Done():
		}
		stop()
		if ctx.Err() != nil {
			m.hold = hold{}
			return look{v: missing} // the holder took too long: load as before
		}
	}
}
