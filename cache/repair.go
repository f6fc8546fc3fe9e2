package cache

import (
	"context"
	"time"
)

// removeKey removes a key that may hold a version older than revision. Where
// that fails too, the key is left unwritten: its floor refuses what it
// holds and fills below revision, and Repair removes it once Redis answers,
// so that other gateways stop seeing it as well (the change feed also
// applies the write, whoever the writer was). It reports whether the key
// was removed.
func (c *Cache) removeKey(ctx context.Context, k Key, revision int64) bool {
	name := k.name(c.prefix)
	err := c.shared.del(ctx, name)
	if err == nil {
		c.floors.written(k)
		return true
	}
	c.counts.incoherent.Add(1)
	c.floors.doubt(k, unwritten, revision)
	c.log.ErrorContext(ctx, "cache key may hold an old version until repaired", "key", name, "err", err)
	return false
}

// repair removes an unwritten key from the shared tier and reports whether
// it did.
func (c *Cache) repair(ctx context.Context, k Key) bool {
	if err := c.shared.del(ctx, k.name(c.prefix)); err != nil {
		return false
	}
	c.floors.written(k)
	return true
}

// Repair removes unwritten keys every interval until ctx ends; while none
// is unwritten it sleeps until one is.
func (c *Cache) Repair(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if len(c.floors.unwritten()) == 0 {
			t.Stop()
			select {
			case <-ctx.Done():
				return
			case <-c.floors.wake:
			}
			t.Reset(every)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, k := range c.floors.unwritten() {
			if !c.repair(ctx, k) {
				break // the tier is still failing
			}
		}
	}
}
