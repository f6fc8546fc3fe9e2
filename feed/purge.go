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
func (l *loop) purge(ctx context.Context, hard bool, id int64, seqs []int64) {
	l.mu.Lock()
	for _, seq := range seqs {
		l.inflight[seq] = true
	}
	l.mu.Unlock()
	l.deps.Purger.PurgeBackground(ctx, hard, func(delivered bool) {
		select {
		case l.purged <- purged{seqs: seqs, delivered: delivered}:
		default: // the orphan scan purges them again
			l.mu.Lock()
			defer l.mu.Unlock()
			for _, seq := range seqs {
				delete(l.inflight, seq)
			}
		}
	}, l.deps.Keys(id)...)
}

// idle reports whether no purge is under way or waits to be marked.
func (l *loop) idle() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.inflight) == 0 && len(l.purged) == 0
}

// collectPurged marks done the records whose purges ended.
func (l *loop) collectPurged(ctx context.Context) {
	var seqs []int64
	for {
		select {
		case p := <-l.purged:
			seqs = append(seqs, p.seqs...)
			if !p.delivered {
				l.givenUp.Add(uint64(len(p.seqs)))
				l.errors[StagePurge].Add(1)
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
	_, _ = call(ctx, l.s, func(ctx context.Context) (struct{}, error) { return struct{}{}, l.s.MarkDone(ctx, seqs) })
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, seq := range seqs {
		delete(l.inflight, seq)
	}
}

// repurge purges again the records applied at least after ago whose
// purge is not under way here: their consumer died before the CDN
// acknowledged.
func (l *loop) repurge(ctx context.Context, after time.Duration) error {
	if l.deps.Purger == nil {
		return nil
	}
	changes, err := call(ctx, l.s, func(ctx context.Context) ([]upstream.Change, error) {
		return l.s.Unpurged(ctx, after, l.cfg.Batch)
	})
	if err != nil {
		return err
	}
	l.mu.Lock()
	changes = slices.DeleteFunc(changes, func(ch upstream.Change) bool { return l.inflight[ch.Seq] })
	l.mu.Unlock()
	for _, li := range merge(changes) {
		l.purge(ctx, li.hard, li.id, li.seqs)
	}
	return nil
}
