package cache

import (
	"context"
	"sync"
	"time"
	"unsafe"

	"github.com/maypok86/otter/v2"
)

// memory is the only tier of a gateway without Redis: records by key
// name, bounded by bytes (S3-FIFO through otter). It is both stages of a
// read: the local one, looked up without I/O, and the shared one, which
// fills, writes and the change feed write to. Its variants are shared in
// process: it has no record to add them to.
type memory struct {
	mu     sync.Mutex // makes the revision check and the write one step
	cache  *otter.Cache[string, *localValue]
	prefix string
	now    func() time.Time
}

// localValue keeps a record both parsed, for hits, and encoded, for the
// shared tier's get. It is never modified once kept: lookups read it
// without a lock.
type localValue struct {
	r       record
	b       []byte
	expires time.Time
	weight  uint32 // what it costs the heap, for the byte bound
}

// localValueOverhead is what a value costs the heap beyond its encoded
// record: its key, the value, otter's node and its expiry bookkeeping.
// Measured by TestLocalWeigherMatchesTheHeap.
const localValueOverhead = 192

func newMemory(maxBytes int64, prefix string) *memory {
	c := otter.Must(&otter.Options[string, *localValue]{
		MaximumWeight: uint64(maxBytes),
		Weigher:       func(_ string, v *localValue) uint32 { return v.weight },
		// An entry leaves memory when it expires, not when the byte bound
		// evicts it.
		ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[string, *localValue]) time.Duration {
			return time.Until(e.Value.expires)
		}),
	})
	return &memory{cache: c, prefix: prefix, now: time.Now}
}

// lookup returns the parsed record under k's name, without parsing.
func (m *memory) lookup(k Key, now time.Time) (*record, bool) {
	// The name is looked up, never kept: built on the stack, it costs a
	// hit no allocation. (Were the lookup ever to keep it, escape analysis
	// would move buf to the heap: memory stays safe.)
	var buf [96]byte
	name := k.appendName(buf[:0], m.prefix)
	v, ok := m.cache.GetIfPresent(unsafe.String(unsafe.SliceData(name), len(name)))
	if !ok || !now.Before(v.expires) {
		return nil, false
	}
	return &v.r, true
}

// get takes no lease: there is no fleet to share a load with.
func (m *memory) get(_ context.Context, name string, _ *lease) ([]byte, error) {
	v, ok := m.cache.GetIfPresent(name)
	if !ok || !m.now().Before(v.expires) {
		return nil, nil
	}
	return v.b, nil
}

func (m *memory) fill(_ context.Context, names []string, r record, ttl time.Duration, _ *lease) []error {
	for _, name := range names {
		m.set(name, r, ttl)
	}
	return make([]error, len(names))
}

// write applies key writes as Redis's scripts do.
func (m *memory) write(_ context.Context, writes []keyWrite) []error {
	for _, w := range writes {
		m.apply(w)
	}
	return make([]error, len(writes))
}

func (m *memory) apply(w keyWrite) {
	if !w.ifCached {
		m.set(w.name, w.value, w.ttl)
		return
	}
	m.mu.Lock()
	cur, ok := m.cache.GetIfPresent(w.name)
	m.mu.Unlock()
	switch {
	case !ok || !m.now().Before(cur.expires):
		m.set(w.name, w.floor, time.Until(time.UnixMilli(w.floor.freshUntil)))
	case cur.r.revision < w.value.revision:
		m.set(w.name, w.value, w.ttl)
	}
}

func (m *memory) set(name string, r record, ttl time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.cache.GetIfPresent(name); ok && m.now().Before(cur.expires) && cur.r.revision > r.revision {
		return
	}
	// The value keeps the body and tag in b, its encoded form, and shares
	// the variants with r: both keys of a version, written together,
	// compress it once. Every variant of a record made in this process was
	// kept since (variants.added counts it).
	shared := r.variants
	r.variants = nil
	b := r.encode()
	parsed, err := decodeRecord(b) // its slices point into b: one copy kept
	if err != nil {
		return // encode makes what decode reads
	}
	if shared != nil {
		parsed.variants = shared
	}
	parsed = parsed.withDate(m.now())
	weight := localWeight(name, b, shared) + uint32(sizeClass(cap(parsed.date)))
	m.cache.Set(name, &localValue{r: parsed, b: b, expires: m.now().Add(ttl), weight: weight})
}

func (m *memory) del(_ context.Context, name string) error {
	m.cache.Invalidate(name)
	return nil
}

// reweigh charges k's value again, where it holds the version whose
// variants v are. Its encoded form stays without: a read through it only
// compresses again.
func (m *memory) reweigh(k Key, v *variants) {
	name := k.name(m.prefix)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cache.ComputeIfPresent(name, func(cur *localValue) (*localValue, otter.ComputeOp) {
		if cur.r.variants != v {
			return cur, otter.CancelOp
		}
		next := *cur // values are read without the lock: a new one
		next.weight = localWeight(name, cur.b, v) + uint32(sizeClass(cap(cur.r.date)))
		return &next, otter.WriteOp
	})
}

// localWeight is what a value costs the heap: its key, its encoded record
// (which its parsed record's slices point into), its variants made since,
// and the overhead.
func localWeight(name string, b []byte, v *variants) uint32 {
	return uint32(min(len(name)+sizeClass(cap(b))+v.size()+localValueOverhead, 1<<31))
}
