package cache

import (
	"sync"
	"sync/atomic"
	"time"
)

// floors is this process's one answer to "refuse a version below revision
// R": a floor per key, read by admit for Redis copies and by the local
// tier before it keeps one. The Redis floor record (kindFloor) is its
// fleet-wide form. A floor is raised two ways:
//   - a listing's revision, on its id key, by every invalidation (writes
//     here, other gateways' announcements, the change feed): a copy of
//     the listing below it is old, under either key;
//   - a key held in doubt, whatever it holds: a write could neither
//     update nor remove it (unwritten), or Redis may have missed a change
//     the feed recorded for it (suspect).
//
// The one lifetime rule: a floor stands while a copy below it can still be
// read. A revision stands floorFor (Cache.floorFor); a doubt, until the
// key is known rewritten (a write or a fill reached it, Repair removed
// it, the feed caught up).
type floors struct {
	now   func() time.Time
	mu    sync.Mutex
	byKey map[Key]floor
	count atomic.Int64  // len(byKey), read without the lock
	wake  chan struct{} // wakes Repair, which sleeps while no key is unwritten
}

type floor struct {
	// revision: on an id key, the listing's floor; on an unwritten key,
	// the revision a fill must reach to take it.
	revision int64
	until    time.Time // when the revision stops standing
	doubt    doubt
}

// doubt is why the shared tier's copy under a key may be old.
type doubt uint8

const (
	unwritten doubt = 1 << iota // a write could not reach it: Repair removes it
	suspect                     // Redis may have missed a change: until the feed caught up
)

// floorsKept bounds the map before floors that no longer stand are swept.
const floorsKept = 10_000

func newFloors(now func() time.Time) *floors {
	return &floors{now: now, byKey: map[Key]floor{}, wake: make(chan struct{}, 1)}
}

// below reports whether r is a version of a listing below the listing's
// floor standing at at. The common case takes one atomic load.
func (f *floors) below(r *record, at time.Time) bool {
	if r.id <= 0 || f.count.Load() == 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.belowLocked(r, at)
}

func (f *floors) belowLocked(r *record, at time.Time) bool {
	fl, ok := f.byKey[ByID(r.id)]
	return ok && r.id > 0 && r.revision < fl.revision && at.Before(fl.until)
}

// doubted reports whether the shared tier's copy under k is in doubt, with
// the floor that says so.
func (f *floors) doubted(k Key) (floor, bool) {
	if f.count.Load() == 0 {
		return floor{}, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fl, ok := f.byKey[k]
	return fl, ok && fl.doubt != 0
}

// refuses reports whether a Redis copy r under k is kept out at now: k is
// in doubt, or r is below its listing's floor. One lock, where any stands.
func (f *floors) refuses(k Key, r *record, now time.Time) bool {
	if f.count.Load() == 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byKey[k].doubt != 0 || f.belowLocked(r, now)
}

// unwrittenAbove reports whether k is unwritten at a revision above
// revision: a fill of revision must not take it.
func (f *floors) unwrittenAbove(k Key, revision int64) bool {
	fl, doubted := f.doubted(k)
	return doubted && fl.doubt&unwritten != 0 && revision < fl.revision
}

// unwrittenKey reports whether a write could not reach k.
func (f *floors) unwrittenKey(k Key) bool {
	fl, doubted := f.doubted(k)
	return doubted && fl.doubt&unwritten != 0
}

// raise raises the floor of each invalidated listing to its revision, to
// stand for d.
func (f *floors) raise(items []Invalidation, d time.Duration) {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, it := range items {
		k := ByID(it.ID)
		if fl := f.byKey[k]; fl.revision < it.Revision || !now.Before(fl.until) {
			fl.revision, fl.until = max(fl.revision, it.Revision), now.Add(d)
			f.byKey[k] = fl
		}
	}
	f.sweep(now)
}

// doubt puts k in doubt for why; an unwritten key takes no fill below
// revision.
func (f *floors) doubt(k Key, why doubt, revision int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.byKey[k]
	fl.doubt |= why
	if why == unwritten {
		fl.revision = max(fl.revision, revision)
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
	f.byKey[k] = fl
	f.count.Store(int64(len(f.byKey)))
}

// suspects replaces the keys suspected of missed changes with keys.
func (f *floors) suspects(keys []Key) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clear(suspect)
	for _, k := range keys {
		fl := f.byKey[k]
		fl.doubt |= suspect
		f.byKey[k] = fl
	}
	f.count.Store(int64(len(f.byKey)))
}

// caughtUp ends every suspicion: the feed applied what Redis missed.
func (f *floors) caughtUp() {
	if f.count.Load() == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clear(suspect)
}

// written ends k's unwritten doubt: a write or a fill reached the key.
func (f *floors) written(k Key) {
	if f.count.Load() == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl, ok := f.byKey[k]; ok && fl.doubt&unwritten != 0 {
		fl.doubt &^= unwritten
		f.set(k, fl, f.now())
	}
}

// unwritten lists the keys a write could not reach, for Repair.
func (f *floors) unwritten() []Key {
	f.mu.Lock()
	defer f.mu.Unlock()
	var keys []Key
	for k, fl := range f.byKey {
		if fl.doubt&unwritten != 0 {
			keys = append(keys, k)
		}
	}
	return keys
}

// clear ends the doubt why on every key. The caller holds mu.
func (f *floors) clear(why doubt) {
	now := f.now()
	for k, fl := range f.byKey {
		if fl.doubt&why != 0 {
			fl.doubt &^= why
			f.set(k, fl, now)
		}
	}
}

// set stores fl under k, or forgets k where fl no longer stands. The
// caller holds mu.
func (f *floors) set(k Key, fl floor, now time.Time) {
	if fl.doubt == 0 && !now.Before(fl.until) {
		delete(f.byKey, k)
	} else {
		f.byKey[k] = fl
	}
	f.count.Store(int64(len(f.byKey)))
}

// sweep forgets the floors that no longer stand, once there are many.
// The caller holds mu.
func (f *floors) sweep(now time.Time) {
	if len(f.byKey) > floorsKept {
		for k, fl := range f.byKey {
			if fl.doubt == 0 && !now.Before(fl.until) {
				delete(f.byKey, k)
			}
		}
	}
	f.count.Store(int64(len(f.byKey)))
}
