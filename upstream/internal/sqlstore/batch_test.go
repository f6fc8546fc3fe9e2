package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/upstream"
)

// fakeReads is a store of listings 1..100 whose single reads wait at a gate
// until the test opens it, and which records every query it runs.
type fakeReads struct {
	gate     chan struct{}
	manyErr  error
	mu       sync.Mutex
	singles  []int64
	batches  [][]int64
	inFlight int
	maxSeen  int
}

func newFakeReads() *fakeReads { return &fakeReads{gate: make(chan struct{})} }

func (f *fakeReads) enter() {
	f.mu.Lock()
	f.inFlight++
	f.maxSeen = max(f.maxSeen, f.inFlight)
	f.mu.Unlock()
}

func (f *fakeReads) leave() {
	f.mu.Lock()
	f.inFlight--
	f.mu.Unlock()
}

func (f *fakeReads) one(ctx context.Context, id int64) (upstream.Encoded, error) {
	f.enter()
	defer f.leave()
	f.mu.Lock()
	f.singles = append(f.singles, id)
	f.mu.Unlock()
	select {
	case <-f.gate:
	case <-ctx.Done():
		return upstream.Encoded{}, ctx.Err()
	}
	return encodedOf(id)
}

func (f *fakeReads) many(_ context.Context, ids []int64) (map[int64]answer, error) {
	f.enter()
	defer f.leave()
	f.mu.Lock()
	f.batches = append(f.batches, slices.Clone(ids))
	err := f.manyErr
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	found := map[int64]answer{}
	for _, id := range ids {
		if e, err := encodedOf(id); !errors.Is(err, upstream.ErrNotFound) {
			found[id] = answer{e, err}
		}
	}
	return found, nil
}

// encodedOf is what listing id reads as: 1..100 exist, and 13's document
// does not decode.
func encodedOf(id int64) (upstream.Encoded, error) {
	switch {
	case id == 13:
		return upstream.Encoded{}, errors.New("decode document: bad")
	case id < 1 || id > 100:
		return upstream.Encoded{}, upstream.ErrNotFound
	}
	return upstream.Encoded{ID: id, Body: fmt.Appendf(nil, `{"id":%d}`, id)}, nil
}

// readAll starts a read of each id and returns their answers by id, once
// all are in.
func readAll(b *batcher[int64], ctx context.Context, ids []int64) map[int64]answer {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		got = map[int64]answer{}
	)
	for _, id := range ids {
		wg.Go(func() {
			e, err := b.get(ctx, id)
			mu.Lock()
			got[id] = answer{e, err}
			mu.Unlock()
		})
	}
	wg.Wait()
	return got
}

// waitQueued waits until n reads wait in b's queue.
func waitQueued(t *testing.T, b *batcher[int64], n int) {
	t.Helper()
	testenv.Eventually(t, fmt.Sprintf("%d reads queued", n), func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.queue) >= n
	})
}

func requireAnswers(t *testing.T, got map[int64]answer) {
	t.Helper()
	for id, a := range got {
		want, wantErr := encodedOf(id)
		switch {
		case wantErr == nil && (a.err != nil || string(a.e.Body) != string(want.Body)):
			t.Errorf("listing %d: got %q, %v; want %q", id, a.e.Body, a.err, want.Body)
		case errors.Is(wantErr, upstream.ErrNotFound) && !errors.Is(a.err, upstream.ErrNotFound):
			t.Errorf("listing %d: got %q, %v; want ErrNotFound", id, a.e.Body, a.err)
		case wantErr != nil && !errors.Is(wantErr, upstream.ErrNotFound) && (a.err == nil || errors.Is(a.err, upstream.ErrNotFound)):
			t.Errorf("listing %d: got %q, %v; want the decode error", id, a.e.Body, a.err)
		}
	}
}

// TestBatcherMergesWaitingReads: while every slot is busy, reads wait and
// then share queries of at most maxKeys; each gets its own answer, a
// missing listing ErrNotFound and a broken one its own error; no more
// queries than slots run at once.
func TestBatcherMergesWaitingReads(t *testing.T) {
	f := newFakeReads()
	b := &batcher[int64]{slots: 2, maxKeys: 8, one: f.one, many: f.many}
	ctx := context.Background()

	// Two reads take the slots and wait at the gate.
	first := make(chan map[int64]answer)
	go func() { first <- readAll(b, ctx, []int64{1, 2}) }()
	for f.singlesSeen() < 2 {
		time.Sleep(time.Millisecond)
	}
	// The rest queue: 20 listings, one missing, one broken.
	ids := []int64{3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 999}
	rest := make(chan map[int64]answer)
	go func() { rest <- readAll(b, ctx, ids) }()
	waitQueued(t, b, len(ids))
	close(f.gate)

	requireAnswers(t, <-first)
	got := <-rest
	if len(got) != len(ids) {
		t.Fatalf("%d answers for %d reads", len(got), len(ids))
	}
	requireAnswers(t, got)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.singles) != 2 {
		t.Errorf("single reads %v; want only the two that found a free slot", f.singles)
	}
	var batched []int64
	for _, batch := range f.batches {
		if len(batch) > 8 {
			t.Errorf("a query of %d keys; want at most 8", len(batch))
		}
		batched = append(batched, batch...)
	}
	slices.Sort(batched)
	if !slices.Equal(batched, ids) {
		t.Errorf("batched %v; want each waiting read once: %v", batched, ids)
	}
	if len(f.batches) != 3 {
		t.Errorf("%d batch queries for %d waiting reads of at most 8; want 3", len(f.batches), len(ids))
	}
	if f.maxSeen > 2 {
		t.Errorf("%d queries at once; want at most the 2 slots", f.maxSeen)
	}
}

func (f *fakeReads) singlesSeen() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.singles)
}

// TestBatcherFailedBatchReadsOneByOne: a batch that fails (a dead
// connection) is read again one key at a time, so no read fails with it.
func TestBatcherFailedBatchReadsOneByOne(t *testing.T) {
	f := newFakeReads()
	f.manyErr = errors.New("conn closed")
	b := &batcher[int64]{slots: 1, maxKeys: 8, one: f.one, many: f.many}
	ctx := context.Background()
	first := make(chan map[int64]answer)
	go func() { first <- readAll(b, ctx, []int64{1}) }()
	for f.singlesSeen() < 1 {
		time.Sleep(time.Millisecond)
	}
	ids := []int64{2, 3, 4, 999}
	rest := make(chan map[int64]answer)
	go func() { rest <- readAll(b, ctx, ids) }()
	waitQueued(t, b, len(ids))
	close(f.gate)
	requireAnswers(t, <-first)
	got := <-rest
	requireAnswers(t, got)
	if f.singlesSeen() != 1+len(ids) {
		t.Errorf("%d single reads; want the first and one per key of the failed batch", f.singlesSeen())
	}
}

// TestBatcherWaiterHonoursItsContext: a queued read whose context ends
// returns at once; the others of its batch are answered, and a batch's
// query runs until the latest of its readers' deadlines.
func TestBatcherWaiterHonoursItsContext(t *testing.T) {
	f := newFakeReads()
	var deadlines []time.Time
	many := func(ctx context.Context, ids []int64) (map[int64]answer, error) {
		d, _ := ctx.Deadline()
		f.mu.Lock()
		deadlines = append(deadlines, d)
		f.mu.Unlock()
		return f.many(ctx, ids)
	}
	b := &batcher[int64]{slots: 1, maxKeys: 8, one: f.one, many: many}
	first := make(chan map[int64]answer)
	go func() { first <- readAll(b, context.Background(), []int64{1}) }()
	for f.singlesSeen() < 1 {
		time.Sleep(time.Millisecond)
	}
	short, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error)
	go func() {
		_, err := b.get(short, 2)
		gaveUp <- err
	}()
	late := time.Now().Add(time.Hour)
	long, cancelLong := context.WithDeadline(context.Background(), late)
	defer cancelLong()
	soon, cancelSoon := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelSoon()
	rest := make(chan map[int64]answer, 2)
	go func() { rest <- readAll(b, long, []int64{3}) }()
	go func() { rest <- readAll(b, soon, []int64{4}) }()
	waitQueued(t, b, 3)
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("the read whose context ended returned %v; want context.Canceled", err)
	}
	close(f.gate)
	requireAnswers(t, <-first)
	requireAnswers(t, <-rest)
	requireAnswers(t, <-rest)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(deadlines) == 0 || !deadlines[0].Equal(late) {
		t.Errorf("the batch's deadlines %v; want the latest reader's, %v", deadlines, late)
	}
	for _, batch := range f.batches {
		if slices.Contains(batch, 2) {
			t.Errorf("batch %v holds the read that gave up", batch)
		}
	}
}
