package cache

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

// Changes made by writers other than this gateway reach the cache through
// the change feed: its consumer reads each changed listing's state from
// the store and hands it to Apply, which brings every tier up to date and
// tells every gateway.

// Update is a listing's state after writes made elsewhere, with every
// number it may be cached under.
type Update struct {
	State upstream.ListingState
	// Revision is the highest revision the writes recorded; a removed
	// row's state has none of its own.
	Revision int64
	// Numbers are the listing numbers the writes named, old and new. A
	// live or deleted listing's current one is taken from its state.
	Numbers []Key
}

// Apply brings every tier up to date with changes: both keys of a live
// listing are refreshed where cached (and floored where not), a deleted
// one's get its tombstone, a removed one's and every number it left get a
// floor; this gateway's local tier drops them, and every other gateway is
// told and waited for, as for a write of this gateway's. It returns, in
// the order of changes, the error of each that was not applied in full.
func (c *Cache) Apply(ctx context.Context, changes []Update) []error {
	errs := make([]error, len(changes))
	var (
		writes []keyWrite
		owner  []int // the change each write belongs to
		items  []Invalidation
	)
	for i, ch := range changes {
		ws, its, err := c.changeWrites(ch)
		if err != nil {
			errs[i] = err
			continue
		}
		for range ws {
			owner = append(owner, i)
		}
		writes = append(writes, ws...)
		items = append(items, its...)
	}
	for i, err := range c.writeKeys(ctx, writes) {
		if err != nil && errs[owner[i]] == nil {
			errs[owner[i]] = err
		}
	}
	c.applyInvalidations(items)
	if err := c.announce(ctx, items...); err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
	}
	return errs
}

// changeWrites lists the key writes and the invalidations of one change.
func (c *Cache) changeWrites(ch Update) ([]keyWrite, []Invalidation, error) {
	st := ch.State
	id := st.Listing.ID
	rev := max(ch.Revision, st.Listing.Revision)
	kept := c.cfg.Fresh + c.cfg.Stale
	floorOf := func(k Key) record {
		return record{revision: rev, id: id, firmID: k.FirmID, no: k.No, kind: kindFloor, etag: []byte("-"),
			freshUntil: c.until(c.floorTTL())}
	}
	var (
		writes  []keyWrite
		current Key
	)
	switch {
	case st.Gone:
		writes = append(writes, c.keyWrite(ByID(id), floorOf(Key{}), c.floorTTL()))
	case st.Deleted:
		l := st.Listing
		current = ByNumber(l.FirmID, l.No)
		tomb := record{revision: rev, id: id, firmID: l.FirmID, no: l.No, kind: kindAbsent, etag: []byte("-"), freshUntil: c.until(kept)}
		for _, k := range []Key{ByID(id), current} {
			writes = append(writes, c.keyWrite(k, tomb, kept))
		}
	default:
		l := st.Listing
		current = ByNumber(l.FirmID, l.No)
		r := c.recordOfEncoded(st.Encoded)
		if st.Encoded.Body == nil {
			var err error
			if r, err = c.recordOf(l); err != nil {
				return nil, nil, err
			}
		}
		for _, k := range []Key{ByID(id), current} {
			w := c.keyWrite(k, r, kept)
			w.ifCached, w.floor = true, floorOf(k)
			writes = append(writes, w)
		}
	}
	items := []Invalidation{}
	if current != (Key{}) {
		items = append(items, Invalidation{ID: id, FirmID: current.FirmID, No: current.No, Revision: rev})
	}
	for _, k := range ch.Numbers {
		if k == current {
			continue
		}
		writes = append(writes, c.keyWrite(k, floorOf(k), c.floorTTL()))
		items = append(items, Invalidation{ID: id, FirmID: k.FirmID, No: k.No, Revision: rev})
	}
	if len(items) == 0 { // a removed row that named no number: the id alone
		items = append(items, Invalidation{ID: id, Revision: rev})
	}
	return writes, items, nil
}

// floorTTL is how long a floor stands: longer than any load that started
// before the change can take.
func (c *Cache) floorTTL() time.Duration { return 2 * c.loadTimeout }

// keyWrite is a write of value under k for ttl.
func (c *Cache) keyWrite(k Key, value record, ttl time.Duration) keyWrite {
	return keyWrite{key: k, name: k.name(c.prefix), value: value, ttl: ttl}
}

// writeKeys runs writes on the shared tier, in one round trip where it
// can, and returns their errors in order.
func (c *Cache) writeKeys(ctx context.Context, writes []keyWrite) []error {
	if len(writes) == 0 {
		return nil
	}
	for _, w := range writes {
		c.flights.forget(w.name) // a flight that read the old version is not joined
	}
	errs := c.shared.write(ctx, writes)
	for i, err := range errs {
		if err == nil {
			c.floors.written(writes[i].key)
		}
	}
	return errs
}

// announce tells the other gateways sharing Redis to drop older versions,
// and waits for them within the invalidation wait; this gateway has
// applied the items already. An announcement that did not go out is
// logged and returned (ErrNotAnnounced): the change feed repeats what a
// writer did not settle. Without Redis there is nobody to tell.
func (c *Cache) announce(ctx context.Context, items ...Invalidation) error {
	if c.inv == nil || len(items) == 0 {
		return nil
	}
	if err := c.inv.announce(ctx, items); err != nil {
		return fmt.Errorf("%w: %w", ErrNotAnnounced, err)
	}
	return nil
}

// ErrNotAnnounced is Apply's error for changes whose announcement to the
// other gateways did not go out.
var ErrNotAnnounced = errors.New("announcement not sent")

// errNoRedis is RedisIdentity's answer without Redis.
var errNoRedis = errors.New("no Redis configured")
