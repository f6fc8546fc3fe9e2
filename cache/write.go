package cache

import (
	"context"
	"fmt"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

// Writes pass through to the store and then publish the new version under
// both keys, each guarded by the store's revision, so that a slow fill of
// an older version cannot overwrite it. Publishing runs detached from the
// request: once the store has committed, the cache is brought up to date
// even if the client has gone.

// Create stores a new listing and caches it.
func (c *Cache) Create(ctx context.Context, l upstream.Listing) (upstream.Listing, Entry, error) {
	stored, entries, err := c.Import(ctx, []upstream.Listing{l})
	if err != nil {
		return upstream.Listing{}, Entry{}, err
	}
	return stored[0], entries[0], nil
}

// Import stores new listings, all or none, and caches each.
func (c *Cache) Import(ctx context.Context, ls []upstream.Listing) ([]upstream.Listing, []Entry, error) {
	stored, err := c.src.ImportListings(ctx, ls)
	if err != nil {
		return nil, nil, err
	}
	entries := make([]Entry, len(stored))
	for i, l := range stored {
		if entries[i], err = c.publish(ctx, l); err != nil {
			return nil, nil, err
		}
	}
	return stored, entries, nil
}

// Replace replaces a listing and caches the new version.
func (c *Cache) Replace(ctx context.Context, l upstream.Listing) (upstream.Listing, Entry, error) {
	stored, err := c.src.UpdateListing(ctx, l)
	if err != nil {
		return upstream.Listing{}, Entry{}, err
	}
	e, err := c.publish(ctx, stored)
	return stored, e, err
}

// Delete deletes a listing; both keys then hold "absent".
func (c *Cache) Delete(ctx context.Context, firmID, id int64) error {
	gone, err := c.src.DeleteListing(ctx, firmID, id)
	if err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	absent := record{revision: gone.Revision, kind: kindAbsent, etag: []byte("-"), freshUntil: c.until(c.cfg.Negative)}
	for _, name := range c.names(gone) {
		c.group.Forget(name)
		c.replace(ctx, name, absent, c.cfg.Negative)
	}
	return nil
}

// ID returns the id of the listing under k, from the store.
func (c *Cache) ID(ctx context.Context, k Key) (int64, error) {
	if k.ID > 0 {
		return k.ID, nil
	}
	l, err := c.src.ListingByNumber(ctx, k.FirmID, k.No)
	return l.ID, err
}

func (c *Cache) publish(ctx context.Context, l upstream.Listing) (Entry, error) {
	r, err := c.recordOf(l)
	if err != nil {
		return Entry{}, fmt.Errorf("listing %d: %w", l.ID, err)
	}
	ctx = context.WithoutCancel(ctx)
	for _, name := range c.names(l) {
		// Later readers in this process must not join a flight that
		// started before the write.
		c.group.Forget(name)
		c.replace(ctx, name, r, c.cfg.Fresh+c.cfg.Stale)
	}
	return r.entry(Miss), nil
}

// replace writes r under name. Where the write fails, it removes the key
// instead; where that fails too, the key is marked dirty: this process
// serves it from the store, and Repair removes it once the tier answers.
func (c *Cache) replace(ctx context.Context, name string, r record, ttl time.Duration) {
	var err error
	if ttl > 0 {
		err = c.tier.set(ctx, name, r, ttl)
	} else {
		err = c.tier.del(ctx, name)
	}
	c.observe(err)
	if err == nil {
		c.clean(name)
		return
	}
	if err := c.tier.del(ctx, name); err != nil {
		c.incoherent.Add(1)
		c.markDirty(name)
		c.log.Error("cache key may hold an old version until repaired", "key", name, "err", err)
		return
	}
	c.clean(name)
}

func (c *Cache) isDirty(name string) bool {
	if c.dirtyCount.Load() == 0 {
		return false // the common case takes no lock
	}
	c.dirtyMu.Lock()
	defer c.dirtyMu.Unlock()
	return c.dirty[name]
}

func (c *Cache) markDirty(name string) {
	c.dirtyMu.Lock()
	defer c.dirtyMu.Unlock()
	c.dirty[name] = true
	c.dirtyCount.Store(int64(len(c.dirty)))
}

func (c *Cache) clean(name string) {
	if c.dirtyCount.Load() == 0 {
		return
	}
	c.dirtyMu.Lock()
	defer c.dirtyMu.Unlock()
	delete(c.dirty, name)
	c.dirtyCount.Store(int64(len(c.dirty)))
}

// repair removes a dirty key and reports whether it succeeded.
func (c *Cache) repair(ctx context.Context, name string) bool {
	err := c.tier.del(ctx, name)
	c.observe(err)
	if err != nil {
		return false
	}
	c.clean(name)
	return true
}

// Repair removes dirty keys every interval until ctx ends, so that other
// gateways sharing the tier stop seeing old versions as soon as it answers
// again.
func (c *Cache) Repair(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.dirtyMu.Lock()
		names := make([]string, 0, len(c.dirty))
		for name := range c.dirty {
			names = append(names, name)
		}
		c.dirtyMu.Unlock()
		for _, name := range names {
			if !c.repair(ctx, name) {
				break // the tier is still failing
			}
		}
	}
}
