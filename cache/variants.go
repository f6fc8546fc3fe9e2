package cache

import (
	"sync/atomic"

	"github.com/realty-gateway/gateway/coding"
)

// A version is compressed once per coding: at the first request for that
// coding, by the gateway that answers it. The result is kept with the
// version's entry in this process's tiers, whose weighers then count it,
// and added to the version's Redis records, so that the other gateways,
// and this one's next read from Redis, find it made. A write makes a new
// version with no variants, so the old ones go with the old version, in
// every tier.

// variants are the compressed bodies of one version, shared by every copy
// of its entry in this process: made once, then only read.
type variants struct {
	bodies [coding.Count]atomic.Pointer[[]byte]
	// added is the heap held by the bodies kept since the record was read:
	// those read with it lie in its buffer.
	added atomic.Int64
}

// get returns the body compressed with c, or nil where it is not made yet.
func (v *variants) get(c coding.Coding) []byte {
	if v == nil {
		return nil
	}
	if b := v.bodies[c].Load(); b != nil {
		return *b
	}
	return nil
}

// keep stores b as the body compressed with c, unless one is kept
// already, and returns the one kept.
func (v *variants) keep(c coding.Coding, b []byte) []byte {
	if v.bodies[c].CompareAndSwap(nil, &b) {
		v.added.Add(int64(sizeClass(cap(b)) + variantOverhead))
		return b
	}
	return *v.bodies[c].Load()
}

// size is the heap that the kept bodies hold beyond their record's buffer.
func (v *variants) size() int {
	if v == nil {
		return 0
	}
	return int(v.added.Load())
}

// any reports whether any variant is kept.
func (v *variants) any() bool {
	for _, c := range coding.Compressed() {
		if v.get(c) != nil {
			return true
		}
	}
	return false
}

// variantOverhead is a kept body's pointer and slice header.
const variantOverhead = 32

// Variant returns e's body in coding cod: the identity body, or the one
// compressed for e's version, made now if no request has asked for cod
// before.
func (c *Cache) Variant(e Entry, cod coding.Coding) ([]byte, error) {
	if cod == coding.Identity {
		return e.Body, nil
	}
	if b := e.variants.get(cod); b != nil {
		return b, nil
	}
	b, err := c.compressor.Compress(cod, e.Body)
	if err != nil || e.variants == nil {
		return b, err
	}
	c.counts.compressed.Add(1)
	b = e.variants.keep(cod, b)
	c.variantKept(e.record())
	return b, nil
}

// compressInto makes r's variant in cod before r is first written, so
// that the fill carries it. A failure leaves it to the first request that
// asks for it.
func (c *Cache) compressInto(r record, cod coding.Coding) {
	if r.variants.get(cod) != nil {
		return
	}
	b, err := c.compressor.Compress(cod, r.body)
	if err != nil {
		return
	}
	c.counts.compressed.Add(1)
	r.variants.keep(cod, b)
}

// variantKept charges this process's tiers for r's new variant and adds
// it to r's records in the shared tier, where they still hold r's
// version.
func (c *Cache) variantKept(r record) {
	keys := [2]Key{ByID(r.id), ByNumber(r.firmID, r.no)}
	if c.local != nil {
		for _, k := range keys {
			c.local.reweigh(k, r.variants)
		}
	}
	if c.redis != nil {
		c.redis.addVariants([]string{keys[0].name(c.prefix), keys[1].name(c.prefix)}, r)
	}
}
