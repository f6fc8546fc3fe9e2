package cache

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// dirtyKeys are the shared tier's keys that a write could neither update
// nor remove: they may hold an old version. Admission refuses them, fills
// older than the write skip them, and Repair removes them once the tier
// answers, so that other gateways stop seeing them as well (the change
// feed also applies the write, whoever the writer was).
type dirtyKeys struct {
	mu    sync.Mutex
	names map[string]int64 // key: the revision that failed to publish
	count atomic.Int64     // len(names), read without the lock
	wake  chan struct{}    // wakes Repair, which sleeps while nothing is dirty
}

func newDirtyKeys() dirtyKeys {
	return dirtyKeys{names: map[string]int64{}, wake: make(chan struct{}, 1)}
}

// has reports whether k's key under prefix is dirty; the common case
// takes one atomic load and builds no name.
func (d *dirtyKeys) has(k Key, prefix string) bool {
	if d.count.Load() == 0 {
		return false
	}
	_, ok := d.revision(k.name(prefix))
	return ok
}

// revision is the revision that failed to publish under name, if any.
func (d *dirtyKeys) revision(name string) (int64, bool) {
	if d.count.Load() == 0 {
		return 0, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	rev, ok := d.names[name]
	return rev, ok
}

func (d *dirtyKeys) mark(name string, revision int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.names[name] = max(d.names[name], revision)
	d.count.Store(int64(len(d.names)))
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *dirtyKeys) clean(name string) {
	if d.count.Load() == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.names, name)
	d.count.Store(int64(len(d.names)))
}

func (d *dirtyKeys) list() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	names := make([]string, 0, len(d.names))
	for name := range d.names {
		names = append(names, name)
	}
	return names
}

// removeKey removes a key that may hold a version older than revision. Where
// that fails too, the key is marked dirty. It reports whether the key was
// removed.
func (c *Cache) removeKey(ctx context.Context, name string, revision int64) bool {
	err := c.shared.del(ctx, name)
	if err == nil {
		c.dirty.clean(name)
		return true
	}
	c.counts.incoherent.Add(1)
	c.dirty.mark(name, revision)
	c.log.ErrorContext(ctx, "cache key may hold an old version until repaired", "key", name, "err", err)
	return false
}

// repair removes a key from the shared tier and reports whether it did.
func (c *Cache) repair(ctx context.Context, name string) bool {
	if err := c.shared.del(ctx, name); err != nil {
		return false
	}
	c.dirty.clean(name)
	return true
}

// Repair removes dirty keys every interval until ctx ends; while none is
// dirty it sleeps until one is.
func (c *Cache) Repair(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if c.dirty.count.Load() == 0 {
			t.Stop()
			select {
			case <-ctx.Done():
				return
			case <-c.dirty.wake:
			}
			t.Reset(every)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, name := range c.dirty.list() {
			if !c.repair(ctx, name) {
				break // the tier is still failing
			}
		}
	}
}
