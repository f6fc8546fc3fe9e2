package sqlstore

import (
	"context"
	"sync"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

// batcher merges concurrent reads of listings' responses into shared
// queries, as an auto-pipeline does for Redis: a read finds a free slot
// (at most slots queries in flight) and runs alone, at the cost it had
// before batching; or it waits in the queue, and the next slot to free up
// takes up to maxKeys waiting reads as one query. Nothing waits for a
// batch to fill, so a read is delayed only while the store is busy.
//
// A batch that fails for any reason but its readers' deadlines runs again
// one read at a time, through the engine's repeatable lookups: a dead
// connection costs no read.
type batcher[K comparable] struct {
	slots, maxKeys int
	// one reads a key alone; many reads several, and leaves out of its
	// result the keys that name no listing.
	one  func(ctx context.Context, k K) (upstream.Encoded, error)
	many func(ctx context.Context, ks []K) (map[K]answer, error)

	mu      sync.Mutex
	running int
	queue   []*read[K]
}

// answer is what a batch found for one key.
type answer struct {
	e   upstream.Encoded
	err error
}

// read is one caller's read, answered when done is closed.
type read[K comparable] struct {
	ctx  context.Context
	key  K
	e    upstream.Encoded
	err  error
	done chan struct{}
}

func (b *batcher[K]) get(ctx context.Context, k K) (upstream.Encoded, error) {
	b.mu.Lock()
	if b.running < b.slots {
		b.running++
		b.mu.Unlock()
		e, err := b.one(ctx, k)
		b.next()
		return e, err
	}
	r := &read[K]{ctx: ctx, key: k, done: make(chan struct{})}
	b.queue = append(b.queue, r)
	b.mu.Unlock()
	select {
	case <-r.done:
		return r.e, r.err
	case <-ctx.Done(): // the batch answers the others
		return upstream.Encoded{}, ctx.Err()
	}
}

// next hands the slot just freed to the waiting reads, if any.
func (b *batcher[K]) next() {
	b.mu.Lock()
	var batch []*read[K]
	for len(b.queue) > 0 && len(batch) < b.maxKeys {
		r := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		if r.ctx.Err() == nil { // its reader has gone
			batch = append(batch, r)
		}
	}
	if len(batch) == 0 {
		b.running--
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	go b.run(batch)
}

// run answers batch with one query, under the latest of its readers'
// deadlines, and then frees its slot.
func (b *batcher[K]) run(batch []*read[K]) {
	defer b.next()
	if len(batch) == 1 {
		r := batch[0]
		r.e, r.err = b.one(r.ctx, r.key)
		close(r.done)
		return
	}
	ctx, cancel := batchContext(batch)
	defer cancel()
	keys := make([]K, len(batch))
	for i, r := range batch {
		keys[i] = r.key
	}
	found, err := b.many(ctx, keys)
	if err != nil {
		var wg sync.WaitGroup
		for _, r := range batch {
			wg.Go(func() {
				r.e, r.err = b.one(r.ctx, r.key)
				close(r.done)
			})
		}
		wg.Wait()
		return
	}
	for _, r := range batch {
		if a, ok := found[r.key]; ok {
			r.e, r.err = a.e, a.err
		} else {
			r.err = upstream.ErrNotFound
		}
		close(r.done)
	}
}

// batchContext carries the first reader's values (its trace, its request
// id) and ends at the latest of the readers' deadlines: a reader that
// gives up does not end the query for the others.
func batchContext[K comparable](batch []*read[K]) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(batch[0].ctx)
	var latest time.Time
	for _, r := range batch {
		d, ok := r.ctx.Deadline()
		if !ok {
			return context.WithCancel(ctx)
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(ctx, latest)
}
