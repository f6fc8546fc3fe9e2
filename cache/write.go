package cache

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"time"

	"github.com/realty-gateway/gateway/internal/faultpoint"
	"github.com/realty-gateway/gateway/upstream"
)

// Writes pass through to the store and then publish the new version under
// both keys, each guarded by the store's revision, so that a slow fill of
// an older version cannot overwrite it. Publishing runs detached from the
// request: once the store has committed, the cache is brought up to date
// even if the client has gone. A write whose outcome is unknown (the store
// timed out) removes both keys instead.

// Written is a write as the cache published it: the stored listing (for a
// delete, the tombstone's id, number and revision), the entry to answer
// with, and whether the cache published it in full, which Settle needs.
type Written struct {
	Listing upstream.Listing
	Entry   Entry
	// published: every key took the write (or lost its old copy) and the
	// announcement went out, while Redis was trusted as identity.
	published bool
	identity  string
}

// Create stores a new listing and caches it.
func (c *Cache) Create(ctx context.Context, l upstream.Listing) (Written, error) {
	ws, err := c.Import(ctx, []upstream.Listing{l})
	if err != nil {
		return Written{}, err
	}
	return ws[0], nil
}

// Import stores new listings, all or none, and caches each.
func (c *Cache) Import(ctx context.Context, ls []upstream.Listing) ([]Written, error) {
	identity, trusted := c.trustedIdentity()
	began := c.now()
	stored, err := c.src.ImportListings(ctx, ls)
	if err != nil {
		return nil, err
	}
	faultpoint.Hit(faultpoint.AfterCommit)
	ws := make([]Written, len(stored))
	items := make([]Invalidation, len(stored))
	published := trusted
	for i, l := range stored {
		e, ok, err := c.publish(ctx, l, began)
		if err != nil {
			return nil, err
		}
		ws[i] = Written{Listing: l, Entry: e}
		published = published && ok
		items[i] = invalidationOf(l, l.Revision)
	}
	published = c.announce(ctx, items...) == nil && published
	if !published {
		c.awaitFeed(ctx, stored...)
	}
	for i := range ws {
		ws[i].published, ws[i].identity = published, identity
	}
	return ws, nil
}

// importFloorBatch is how many new listings one pipeline of floors and
// one announcement cover after a streamed import.
const importFloorBatch = 1000

// ImportStream stores the listings of next, all or none, as Import does,
// but for files of any length: the source reads them a batch at a time
// (see upstream.StreamImporter) and the cache keeps none of them. A new
// listing's keys can hold nothing but a cached absence (a 404 read before
// the import), so after the commit both keys of each get a floor, in
// pipelines of importFloorBatch listings, and every gateway is told, as
// the change feed does for another writer's insert: no tier serves an
// absence of an imported listing once ImportStream returns, and none is
// filled with listings nobody reads. It keeps about 4 bytes per listing
// until then (newListings). progress, when set, is told of every batch
// the source wrote. A source that does not stream is given the file
// whole, through Import.
func (c *Cache) ImportStream(ctx context.Context, next iter.Seq2[upstream.Listing, error], progress func(n int)) (int, error) {
	src, ok := c.src.(upstream.StreamImporter)
	if !ok {
		var ls []upstream.Listing
		for l, err := range next {
			if err != nil {
				return 0, err
			}
			ls = append(ls, l)
		}
		ws, err := c.Import(ctx, ls)
		if err == nil && progress != nil {
			progress(len(ws))
		}
		return len(ws), err
	}
	var added newListings
	n, err := src.ImportStream(ctx, next, func(stored []upstream.Listing) error {
		for _, l := range stored {
			added.add(invalidationOf(l, l.Revision))
		}
		if progress != nil {
			progress(len(stored))
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	faultpoint.Hit(faultpoint.AfterCommit)
	var errs []error
	for chunk := range added.chunks(importFloorBatch) {
		errs = append(errs, c.floorNew(ctx, chunk))
	}
	if err := errors.Join(errs...); err != nil {
		return n, fmt.Errorf("imported %d listings, but not every gateway was told: %w", n, err)
	}
	return n, nil
}

// floorNew gives both keys of each new listing a floor at its revision,
// and tells every gateway. A key that could be neither floored nor removed
// is left unwritten, as a write's is.
func (c *Cache) floorNew(ctx context.Context, items []Invalidation) error {
	ctx = context.WithoutCancel(ctx)
	ttl := c.floorTTL()
	writes := make([]keyWrite, 0, 2*len(items))
	for _, it := range items {
		for _, k := range []Key{ByID(it.ID), ByNumber(it.FirmID, it.No)} {
			floor := record{revision: it.Revision, id: it.ID, firmID: k.FirmID, no: k.No, kind: kindFloor, etag: []byte("-"),
				freshUntil: c.until(ttl)}
			writes = append(writes, c.keyWrite(k, floor, ttl))
		}
	}
	for i, err := range c.writeKeys(ctx, writes) {
		if err != nil {
			c.removeKey(ctx, writes[i].key, writes[i].value.revision)
		}
	}
	c.applyInvalidations(items)
	return c.announce(ctx, items...)
}

// Resolve reads the stored listing under k, bypassing the cache: writes
// need its current id, firm and number.
func (c *Cache) Resolve(ctx context.Context, k Key) (upstream.Listing, error) {
	if k.ID > 0 {
		return c.src.ListingByID(ctx, k.ID)
	}
	return c.src.ListingByNumber(ctx, k.FirmID, k.No)
}

// Replace replaces the listing current with next, where cond holds, and
// caches the result. A failed precondition changes nothing.
func (c *Cache) Replace(ctx context.Context, current, next upstream.Listing, cond upstream.Precondition) (Written, error) {
	identity, trusted := c.trustedIdentity()
	next.ID, next.FirmID = current.ID, current.FirmID
	began := c.now()
	stored, err := c.src.UpdateListing(ctx, next, cond)
	if err != nil {
		c.afterFailedWrite(ctx, current, err)
		return Written{}, err
	}
	faultpoint.Hit(faultpoint.AfterCommit)
	e, ok, err := c.publish(ctx, stored, began)
	if err != nil {
		return Written{}, err
	}
	published := c.announce(ctx, invalidationOf(stored, stored.Revision)) == nil && ok && trusted
	if !published {
		c.awaitFeed(ctx, stored)
	}
	return Written{Listing: stored, Entry: e, published: published, identity: identity}, nil
}

// Delete deletes the listing current, where cond holds; both keys then
// hold "absent". Ids and numbers are never reused, so the tombstone may
// stay as long as any cached version could.
func (c *Cache) Delete(ctx context.Context, current upstream.Listing, cond upstream.Precondition) (Written, error) {
	identity, trusted := c.trustedIdentity()
	gone, err := c.src.DeleteListing(ctx, current.FirmID, current.ID, cond)
	if err != nil {
		c.afterFailedWrite(ctx, current, err)
		return Written{}, err
	}
	faultpoint.Hit(faultpoint.AfterCommit)
	ctx = context.WithoutCancel(ctx)
	ttl := c.cfg.Fresh + c.cfg.Stale
	tombstone := record{revision: gone.Revision, id: gone.ID, firmID: gone.FirmID, no: gone.No,
		kind: kindAbsent, etag: []byte("-"), freshUntil: c.until(ttl)}
	published := trusted
	for _, k := range listingKeys(gone) {
		c.flights.forget(k.name(c.prefix))
		published = c.publishKey(ctx, k, tombstone, ttl) && published
	}
	c.applyInvalidations([]Invalidation{invalidationOf(gone, gone.Revision)})
	published = c.announce(ctx, invalidationOf(gone, gone.Revision)) == nil && published
	if !published {
		c.awaitFeed(ctx, gone)
	}
	return Written{Listing: gone, published: published, identity: identity}, nil
}

// afterFailedWrite removes both keys when the store may have committed a
// write it did not confirm; the store's own answers change nothing.
func (c *Cache) afterFailedWrite(ctx context.Context, l upstream.Listing, err error) {
	if upstream.Answered(err) {
		return
	}
	ctx = context.WithoutCancel(ctx)
	for _, k := range listingKeys(l) {
		c.flights.forget(k.name(c.prefix))
		c.removeKey(ctx, k, math.MaxInt64)
	}
	// The store may hold the next revision: nothing older may be kept.
	unknown := invalidationOf(l, l.Revision+1)
	c.applyInvalidations([]Invalidation{unknown})
	_ = c.announce(ctx, unknown) // the change feed repeats what was not announced
}

// publish writes l under both keys and reports whether both took it (or
// at least lost their old copy). The local tier keeps l as of began, the
// start of the write (front.keep).
func (c *Cache) publish(ctx context.Context, l upstream.Listing, began time.Time) (Entry, bool, error) {
	r, err := c.recordOf(l)
	if err != nil {
		return Entry{}, false, fmt.Errorf("listing %d: %w", l.ID, err)
	}
	ctx = context.WithoutCancel(ctx)
	ok := true
	for _, k := range listingKeys(l) {
		// Later readers in this process must not join a flight that
		// started before the write.
		c.flights.forget(k.name(c.prefix))
		ok = c.publishKey(ctx, k, r, c.cfg.Fresh+c.cfg.Stale) && ok
	}
	s := since{gen: c.generation(), at: began}
	c.applyInvalidations([]Invalidation{invalidationOf(l, l.Revision)})
	c.keepLocal(ByID(l.ID), r, s)
	c.keepLocal(ByNumber(l.FirmID, l.No), r, s)
	return r.entry(Miss), ok, nil
}

func invalidationOf(l upstream.Listing, revision int64) Invalidation {
	return Invalidation{ID: l.ID, FirmID: l.FirmID, No: l.No, Revision: revision}
}

// publishKey writes r under k, or removes the key where the write fails,
// and reports whether the key no longer holds an older version.
func (c *Cache) publishKey(ctx context.Context, k Key, r record, ttl time.Duration) bool {
	if err := c.writeKeys(ctx, []keyWrite{c.keyWrite(k, r, ttl)})[0]; err != nil {
		return c.removeKey(ctx, k, r.revision)
	}
	return true
}

// Purge removes both keys of the listing under k from the shared tier and
// from every gateway's local tier, so that the next read of either form
// loads it from the store. The listing's other key is read from the record
// cached under k, else from the store; where neither knows the listing,
// only k's own key is removed. It returns the keys removed.
func (c *Cache) Purge(ctx context.Context, k Key) ([]string, error) {
	name := k.name(c.prefix)
	it := Invalidation{ID: k.ID, FirmID: k.FirmID, No: k.No}
	b, err := c.shared.get(ctx, name, nil)
	if err != nil {
		return nil, fmt.Errorf("cache key %s: %w", name, err)
	}
	if r, derr := decodeRecord(b); b != nil && derr == nil && r.id > 0 { // a cached absence names no listing
		it = Invalidation{ID: r.id, FirmID: r.firmID, No: r.no, Revision: r.revision}
	} else if l, err := c.Resolve(ctx, k); err == nil {
		it = invalidationOf(l, l.Revision)
	} else if !errors.Is(err, upstream.ErrNotFound) {
		return nil, fmt.Errorf("listing %s: %w", name, err)
	}
	keys := []Key{k}
	if it.ID > 0 && it.FirmID > 0 {
		both := listingKeys(upstream.Listing{ID: it.ID, FirmID: it.FirmID, No: it.No})
		keys = both[:]
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.name(c.prefix)
		c.flights.forget(names[i])
		if err := c.shared.del(ctx, names[i]); err != nil {
			return nil, fmt.Errorf("cache key %s: %w", names[i], err)
		}
		c.floors.written(k)
	}
	// The revision stays: the current version may be cached again at once.
	c.applyInvalidations([]Invalidation{it})
	_ = c.announce(ctx, it) // the change feed repeats what was not announced
	return names, nil
}
