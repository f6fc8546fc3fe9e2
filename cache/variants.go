package cache

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

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
	c.variantKept(e)
	return b, nil
}

// variantKept charges the tiers in this process for e's new variant and
// adds it to e's records in Redis, where they still hold e's version.
func (c *Cache) variantKept(e Entry) {
	keys := [2]Key{ByID(e.ID), ByNumber(e.FirmID, e.No)}
	if c.front != nil {
		for _, k := range keys {
			c.front.reweigh(k, e.variants)
		}
	}
	switch t := c.tier.(type) {
	case *localTier:
		for _, k := range keys {
			t.reweigh(k.name(c.prefix), e.variants)
		}
	case *redisTier:
		t.addVariants([]string{keys[0].name(c.prefix), keys[1].name(c.prefix)}, e.record())
	}
}

// addVariantsScript replaces a key's record with ARGV[3], which carries
// more variants, where the key still holds the version of revision ARGV[1]
// and tag ARGV[2]; the key's expiry stays. One key per call, so the keys
// may live in different Cluster slots.
const addVariantsScript = `
local cur = redis.call('GET', KEYS[1])
if not cur then
  return 0
end
local rev, etag = string.match(cur, '^v1 (%d+) %S+ %S+ %S+ %S+ %a (%S+)')
if rev ~= ARGV[1] or etag ~= ARGV[2] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[3], 'KEEPTTL')
return 1
`

// addVariants adds r's variants to the records under names. It is best
// effort and does not wait: the commands go out in the auto-pipeline's
// next batch, with the script's source (EVAL), so that no answer needs
// reading. A failure costs a later read the compression, and the script
// cannot replace a newer version, so it is not a sign that Redis missed a
// write; neither the breaker nor the trust in Redis hears of it.
func (t *redisTier) addVariants(names []string, r record) {
	if t.pipe == nil || t.cb.State() == gobreaker.StateOpen {
		return
	}
	ctx := context.Background()
	value := r.encode()
	for _, name := range names {
		cmd := redis.NewCmd(ctx, "eval", addVariantsScript, 1, name, r.revision, string(r.etag), value)
		cmd.SetFirstKeyPos(3) // the key's slot, on a cluster
		t.pipe.Submit(ctx, cmd)
	}
}
