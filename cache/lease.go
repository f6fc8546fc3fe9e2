package cache

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

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

// lease is a miss's lease on its key, the one owner of it: the look that
// finds the key empty takes it (look), a waiter waits for its holder's
// fill (wait), the fill of its key ends it (fill, landed), and the
// flight's deferred release ends it where it is still held. Its methods
// alone change its state; a nil lease takes none. Its key and token are
// spelled only where a look finds the key empty: a hit allocates nothing
// for them.
type lease struct {
	name, owner string
	seq         uint64
	state       leaseState
	// tier is the Redis tier its look ran on: the one that holds it, once
	// taken.
	tier *redisTier
}

// leaseState is where a lease stands.
type leaseState uint8

const (
	// leaseNone: none to take, wait for or release. A lease is none from
	// the start without a fleet, and ends none once a look found the key
	// or failed, its waiter gave up, or its fill or release ended it.
	leaseNone          leaseState = iota
	leaseWanted                   // the look that finds the key empty takes it
	leaseHeld                     // this process holds it: it loads, and its fill ends it
	leaseHeldElsewhere            // another gateway holds it: wait for its fill
)

// newLease is the lease a flight may take on name: none without a fleet
// to share it with, or while coalescing across gateways is off.
func (c *Cache) newLease(name string) lease {
	if _, ok := hashTagged(name); c.inv == nil || !ok || !c.shareFlights() {
		return lease{}
	}
	return lease{name: name, owner: c.inv.id, seq: c.inv.seq.Add(1), state: leaseWanted}
}

// wanted reports whether a look at an empty key takes l, or finds whose
// it is.
func (l *lease) wanted() bool {
	return l != nil && (l.state == leaseWanted || l.state == leaseHeldElsewhere)
}

// heldElsewhere reports whether the last look found l held by another
// gateway.
func (l *lease) heldElsewhere() bool { return l != nil && l.state == leaseHeldElsewhere }

// key is the key that holds l.
func (l *lease) key() string { return leaseKey(l.name) }

// token is l's value in its key. The dot ends it: no token is the start
// of another's.
func (l *lease) token() string { return l.owner + "-" + strconv.FormatUint(l.seq, 36) + "." }

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

// look reads l's key from t and takes l where the key is empty: in the
// look's own round trip while this process's looks mostly find keys
// empty, else in a second one (coldLooks). l records what became of it:
// held here or elsewhere, or none where the key holds a value or the look
// failed (a look that fails is no lease held elsewhere).
func (l *lease) look(ctx context.Context, t *redisTier) ([]byte, error) {
	if t.looks.mostlyEmpty() {
		b, err := l.take(ctx, t)
		if err == nil {
			t.looks.saw(b == nil)
		}
		return b, err
	}
	b, err := t.getValue(ctx, l.name)
	if err == nil {
		t.looks.saw(b == nil)
	}
	if err != nil || b != nil {
		l.state = leaseNone
		return b, err
	}
	return l.take(ctx, t)
}

// take runs the script getOrLease on l's key and lease: the key's value,
// or, on an empty key, l held here or elsewhere.
func (l *lease) take(ctx context.Context, t *redisTier) ([]byte, error) {
	state := leaseNone
	b, err := t.do(ctx, func(ctx context.Context) ([]byte, error) {
		v, err := t.evalOne(ctx, getOrLease.Script, []string{l.name, l.key()}, l.token(), t.leaseTTL.Milliseconds())
		if err != nil {
			return nil, err
		}
		switch v := v.(type) { // the script's answer: the value, or whether the lease was taken
		case string:
			// Not copied, as go-redis's StringCmd.Bytes does not: a record's
			// bytes are never written to.
			return unsafe.Slice(unsafe.StringData(v), len(v)), nil
		case int64:
			state = leaseHeldElsewhere
			if v == 1 {
				state = leaseHeld
			}
			return nil, nil
		}
		return nil, fmt.Errorf("getOrLease answered %T", v)
	})
	if err != nil {
		state = leaseNone
	}
	l.state, l.tier = state, t
	return b, err
}

// wait waits, at most the load timeout, for the fill of the gateway that
// holds l, looking at k through c, and returns the look that admits it.
// It takes l where the holder's has expired; otherwise, and where the
// key is still to load here, l ends up none. Each look follows the watch
// it waits on: a fill announced before the watch began is seen by the
// look, one after it ends the wait.
func (l *lease) wait(ctx context.Context, c *Cache, k Key) look {
	ctx, cancel := context.WithTimeout(ctx, c.loadTimeout)
	defer cancel()
	for announced := false; ; {
		filled, stop := c.inv.watchFill(l.name)
		found := c.readShared(ctx, k, l.name, l)
		switch {
		case l.state == leaseHeld: // the holder's lease expired: this one loads
			stop()
			return found
		case found.v == admitted || found.v == absent:
			stop()
			c.counts.coalesced.Add(1)
			found.collapsed = found.v == admitted
			return found
		case l.state != leaseHeldElsewhere, announced:
			// Not servable, a look that failed, or released without a
			// fill (the holder's store failed): load as before, not one
			// gateway after another.
			stop()
			l.state = leaseNone
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
			l.state = leaseNone
			return look{v: missing} // the holder took too long: load as before
		}
	}
}

// fill is the call that writes args (guardedSet's) under name. The
// holder's fill of l's key also ends l and, where a gateway waits for it,
// publishes the key on channel (guardedSetRelease), in the same round
// trip.
func (l *lease) fill(name string, args []any, channel string) scriptCall {
	if l == nil || l.state != leaseHeld || name != l.name {
		return scriptCall{script: guardedSet.Script, key: name, args: args}
	}
	args = append(slices.Clip(args), l.token(), channel)
	return scriptCall{script: guardedSetRelease.Script, key: name, lease: l.key(), args: args}
}

// landed ends l where its fill of name did: name is l's key and the fill
// wrote it (err is nil). A fill that did not land leaves l to release.
func (l *lease) landed(name string, err error) {
	if err == nil && l != nil && l.state == leaseHeld && name == l.name {
		l.state = leaseNone
	}
}

// release ends l without a fill, where it is still held (the store read
// failed, or the fill did not write l's key), and tells the waiting
// gateways. Deferred by the flight. Best effort, without waiting: a lost
// release costs the waiters their poll, or the lease its expiry.
func (l *lease) release() {
	if l == nil || l.state != leaseHeld {
		return
	}
	l.state = leaseNone
	t := l.tier
	if t.pipe == nil {
		return
	}
	ctx := context.Background()
	cmd := redis.NewCmd(ctx, "eval", releaseLease.src, 2, l.name, l.key(), l.token(), t.filled)
	cmd.SetFirstKeyPos(3) // the key's and its lease's slot, on a cluster
	t.pipe.Submit(ctx, cmd)
}
