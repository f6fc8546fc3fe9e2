package feed

import (
	"context"
	"slices"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

// purged is a purge's outcome for its records.
type purged struct {
	seqs      []int64
	delivered bool
}

// purge asks the CDN to drop a listing's copies; the records are marked
// done when it did, or gave up.
func (w *worker) purge(ctx context.Context, hard bool, id int64, seqs []int64) {
	w.mu.Lock()
	for _, seq := range seqs {
		w.inflight[seq] = true
	}
	w.mu.Unlock()
	w.deps.Purger.PurgeBackground(ctx, hard, func(delivered bool) {
		select {
		case w.purged <- purged{seqs: seqs, delivered: delivered}:
		default: // the orphan scan purges them again
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, seq := range seqs {
				delete(w.inflight, seq)
			}
		}
	}, w.deps.Keys(id)...)
}

// idle reports whether no purge is under way or waits to be marked.
func (w *worker) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.inflight) == 0 && len(w.purged) == 0
}

// collectPurged marks done the records whose purges ended.
func (w *worker) collectPurged(ctx context.Context) {
	var seqs []int64
	for {
		select {
		case p := <-w.purged:
			seqs = append(seqs, p.seqs...)
			if !p.delivered {
				w.givenUp.Add(uint64(len(p.seqs)))
				w.errors[StagePurge].Add(1)
			}
			continue
		default:
		}
		break
	}
	if len(seqs) == 0 {
		return
	}
	// A failure was counted by call; the orphan scan purges them again.
	_, _ = call(ctx, w.s, func(ctx context.Context) (struct{}, error) { return struct{}{}, w.s.MarkDone(ctx, seqs) })
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, seq := range seqs {
		delete(w.inflight, seq)
	}
}

// repurge purges again the records applied at least after ago whose
// purge is not under way here: their consumer died before the CDN
// acknowledged.
func (w *worker) repurge(ctx context.Context, after time.Duration) error {
	if w.deps.Purger == nil {
		return nil
	}
	changes, err := call(ctx, w.s, func(ctx context.Context) ([]upstream.Change, error) {
		return w.s.Unpurged(ctx, after, w.cfg.Batch)
	})
	if err != nil {
		return err
	}
	w.mu.Lock()
	changes = slices.DeleteFunc(changes, func(ch upstream.Change) bool { return w.inflight[ch.Seq] })
	w.mu.Unlock()
	for _, l := range merge(changes) {
		w.purge(ctx, l.hard, l.id, l.seqs)
	}
	return nil
}
