package cache

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
)

// front is the in-process tier in front of Redis: what a response needs,
// keyed by Key, so a hit allocates nothing, takes no lock and parses
// nothing. Other gateways' writes drop its entries through the
// invalidations they announce (Invalidator) before they return. Three
// rules keep an older version out:
//   - an entry lives at most maxAge from the start of the read or write
//     that brought it: the bound on staleness when all else fails, and a
//     write's longest wait for a slow gateway's acknowledgement;
//   - a put below its listing's floor (floors.go) is refused: a slow read
//     of the old version lands too late;
//   - without a live subscription the tier is empty and takes nothing,
//     and a put begun before the subscription was lost is refused (the
//     generation changed): invalidations may have been missed.
type front struct {
	cache  *otter.Cache[Key, *frontEntry]
	maxAge time.Duration

	enabled atomic.Bool
	gen     atomic.Uint64 // raised on every enable and disable
	until   atomic.Int64  // unix nanoseconds when the last entry put expires

	// mu makes a put's floor check and its write one step, against
	// invalidate, which runs after the floor is raised.
	mu     sync.Mutex
	floors *floors
}

type frontEntry struct {
	r       record
	expires int64  // unix nanoseconds
	weight  uint32 // what it costs the heap, for the byte bound
}

// frontEntryOverhead is what an entry costs the heap beyond the buffer its
// body and ETag point into: the entry, the key, otter's node and its
// expiry bookkeeping. Measured by TestFrontWeigherMatchesTheHeap.
const frontEntryOverhead = 256

func newFront(maxBytes int64, maxAge time.Duration, fl *floors) *front {
	c := otter.Must(&otter.Options[Key, *frontEntry]{
		MaximumWeight: uint64(maxBytes),
		Weigher:       func(_ Key, e *frontEntry) uint32 { return e.weight },
		// An entry leaves memory when it expires, not when the byte bound
		// evicts it: a tier of entries nobody reads again stays small.
		ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[Key, *frontEntry]) time.Duration {
			return time.Until(time.Unix(0, e.Value.expires))
		}),
	})
	return &front{cache: c, maxAge: maxAge, floors: fl}
}

// lookup returns the record kept under k, until the entry expires.
func (f *front) lookup(k Key, now time.Time) (*record, bool) {
	if !f.enabled.Load() {
		return nil, false
	}
	fe, ok := f.cache.GetIfPresent(k)
	if !ok || now.UnixNano() >= fe.expires {
		return nil, false
	}
	return &fe.r, true
}

// serving reports whether the tier answers reads (it does once the
// invalidations that keep it coherent are subscribed).
func (f *front) serving() bool { return f.enabled.Load() }

// generation is taken before a read whose result may be put.
func (f *front) generation() uint64 { return f.gen.Load() }

// keep keeps r under k unless the tier changed generation since gen, or r
// is below its listing's floor. Only listings are kept:
// absence is Redis's to cache. r ages from began, when the read or write
// that produced it began: a copy of a version that a write replaced was
// read before that write's announcement, so it expires within maxAge of
// the announcement, however late the read ended or the announcement was
// heard here (a write waits that long at most for acknowledgements).
func (f *front) keep(k Key, r record, gen uint64, began time.Time) {
	if r.kind == kindAbsent || !f.enabled.Load() {
		return
	}
	expires := min(began.Add(f.maxAge).UnixNano(), r.freshUntil*int64(time.Millisecond))
	if expires <= began.UnixNano() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gen.Load() != gen {
		return
	}
	if f.floors.below(&r, began) {
		return
	}
	r = r.withDate(began)
	f.cache.Set(k, &frontEntry{r: r, expires: expires, weight: r.weight(frontEntryOverhead)})
	if expires > f.until.Load() {
		f.until.Store(expires)
	}
}

// holds reports whether the tier may hold an entry that has not expired:
// its invalidations must then be heard at once.
func (f *front) holds(now time.Time) bool { return now.UnixNano() < f.until.Load() }

// reweigh charges k's entry again, where it holds the version whose
// variants v are: a variant was added to it.
func (f *front) reweigh(k Key, v *variants) {
	f.cache.ComputeIfPresent(k, func(fe *frontEntry) (*frontEntry, otter.ComputeOp) {
		if fe.r.variants != v {
			return fe, otter.CancelOp
		}
		next := *fe
		next.weight = fe.r.weight(frontEntryOverhead)
		return &next, otter.WriteOp
	})
}

// invalidate drops both keys of each listing; the caller raised their
// floors first.
func (f *front) invalidate(items []Invalidation) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, it := range items {
		f.cache.Invalidate(ByID(it.ID))
		f.cache.Invalidate(ByNumber(it.FirmID, it.No))
	}
}

// enable starts serving after a subscription is confirmed.
func (f *front) enable() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen.Add(1)
	f.enabled.Store(true)
}

// disable empties the tier and stops it taking entries: invalidations may
// be missed until the subscription is back.
func (f *front) disable() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.enabled.Store(false)
	f.gen.Add(1)
	f.cache.InvalidateAll()
}
