package feed

import (
	"context"
	"errors"
	"slices"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/upstream"
)

// step applies one batch of pending records and reports whether the batch
// was full. Without an adopted Redis it applies nothing yet.
func (l *loop) step(ctx context.Context, ready bool) (bool, error) {
	if !ready {
		return false, nil
	}
	changes, err := call(ctx, l.s, func(ctx context.Context) ([]upstream.Change, error) {
		return l.s.Pending(ctx, l.cfg.Settle, l.cfg.Batch)
	})
	if err != nil {
		return false, err
	}
	if len(changes) == 0 {
		return false, nil
	}
	if !l.cfg.Enabled { // off: the records are only kept bounded
		_, err := call(ctx, l.s, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, l.s.MarkApplied(ctx, seqsOf(changes), true)
		})
		return len(changes) == l.cfg.Batch, err
	}
	return len(changes) == l.cfg.Batch, l.apply(ctx, changes)
}

// listing is one listing's records of a batch, merged.
type listing struct {
	id       int64
	seqs     []int64
	revision int64
	numbers  []cache.Key
	hard     bool // a visibility change or a deletion
	replayed bool // every record is a replay
	created  bool // every record is the listing's creation: see firstVersion
}

// firstVersion reports whether ch records a listing's first version: an
// insert of revision 1, visible before in no form. Any update raises the
// revision above the old one, and a row inserted under the id of a removed
// one continues above its last revision (the triggers see to both), so
// revision 1 is the first row under its id. No edge can hold a copy of it
// that needs a purge: no earlier version of the id existed, an edge never
// stores a 404 (problem answers are no-store, and the shipped VCL stores
// no status of 300 or more), and a number that a removed row left was
// purged under that row's id when it was removed. A bulk import of new
// listings therefore sends the CDN nothing.
func firstVersion(ch upstream.Change) bool {
	return ch.Revision == 1 && !ch.VisibleBefore && !ch.Deleted && !ch.Moved()
}

func merge(changes []upstream.Change) []*listing {
	byID := map[int64]*listing{}
	var order []*listing
	for _, ch := range changes {
		l := byID[ch.ListingID]
		if l == nil {
			l = &listing{id: ch.ListingID, replayed: true, created: true}
			byID[ch.ListingID] = l
			order = append(order, l)
		}
		l.seqs = append(l.seqs, ch.Seq)
		l.revision = max(l.revision, ch.Revision)
		for _, k := range []cache.Key{cache.ByNumber(ch.FirmID, ch.No), cache.ByNumber(ch.OldFirmID, ch.OldNo)} {
			if k.FirmID > 0 && !slices.Contains(l.numbers, k) {
				l.numbers = append(l.numbers, k)
			}
		}
		l.hard = l.hard || ch.Deleted || ch.VisibleBefore != ch.VisibleAfter
		l.replayed = l.replayed && ch.Replayed
		l.created = l.created && firstVersion(ch)
	}
	return order
}

// apply brings a batch to every tier and gateway, marks what was applied,
// and queues the purges.
func (l *loop) apply(ctx context.Context, changes []upstream.Change) error {
	ls := merge(changes)
	ids := make([]int64, len(ls))
	for i, li := range ls {
		ids[i] = li.id
	}
	states, err := call(ctx, l.s, func(ctx context.Context) (map[int64]upstream.ListingState, error) {
		return l.s.Listings(ctx, ids)
	})
	if err != nil {
		return err
	}
	batch := make([]cache.Update, len(ls))
	for i, li := range ls {
		batch[i] = cache.Update{State: states[li.id], Revision: li.revision, Numbers: li.numbers}
	}
	var errs []error
	l.s.outside(ctx, func(ctx context.Context) { errs = l.deps.Target.Apply(ctx, batch) })
	var applied, done []int64
	var purges []*listing
	failed := 0
	for i, li := range ls {
		if errs[i] != nil {
			stage := StageRedis
			if errors.Is(errs[i], cache.ErrNotAnnounced) {
				stage = StageAnnounce
			}
			l.errors[stage].Add(1)
			failed++
			continue
		}
		if li.replayed || li.created || l.deps.Purger == nil {
			if li.created && !li.replayed && l.deps.Purger != nil {
				l.unpurged.Add(1)
			}
			done = append(done, li.seqs...)
			continue
		}
		applied = append(applied, li.seqs...)
		purges = append(purges, li)
	}
	if err := l.mark(ctx, done, true); err != nil {
		return err
	}
	if err := l.mark(ctx, applied, false); err != nil {
		return err
	}
	for _, li := range purges {
		l.purge(ctx, li.hard, li.id, li.seqs)
	}
	if failed > 0 {
		l.log.Debug("changes not applied; retried at the next poll", "listings", failed, "err", errors.Join(errs...))
	}
	return nil
}

func (l *loop) mark(ctx context.Context, seqs []int64, done bool) error {
	if len(seqs) == 0 {
		return nil
	}
	_, err := call(ctx, l.s, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, l.s.MarkApplied(ctx, seqs, done)
	})
	if err != nil {
		return err
	}
	l.applied.Add(uint64(len(seqs)))
	return nil
}

func seqsOf(changes []upstream.Change) []int64 {
	out := make([]int64, len(changes))
	for i, ch := range changes {
		out[i] = ch.Seq
	}
	return out
}
