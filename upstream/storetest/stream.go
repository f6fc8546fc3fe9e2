package storetest

import (
	"context"
	"errors"
	"iter"
	"testing"

	"github.com/realty-gateway/gateway/upstream"
)

// streamOf yields ls, then err when set.
func streamOf(ls []upstream.Listing, err error) iter.Seq2[upstream.Listing, error] {
	return func(yield func(upstream.Listing, error) bool) {
		for _, l := range ls {
			if !yield(l, nil) {
				return
			}
		}
		if err != nil {
			yield(upstream.Listing{}, err)
		}
	}
}

// streamFile is a file longer than several of an import's batches
// (sqlstore's are 2,000 entries): assigned ids and numbers, with given ones
// in the middle of a later batch, and firm B's listings interleaved.
func streamFile(f fixture, n int) []upstream.Listing {
	ls := make([]upstream.Listing, n)
	for i := range ls {
		switch {
		case i == n-3:
			ls[i] = f.listing(int64(10*n), int64(10*n)) // given, above everything
		case i%7 == 0:
			ls[i] = f.listingOfB(0, 0)
		default:
			ls[i] = f.listing(0, 0)
		}
	}
	return ls
}

// testImportStream checks a streamed import across batches: every entry
// stored once, in file order, ids and numbers as ImportListings assigns
// them, the counter moved past the last, and stored told of every batch
// before ImportStream returns.
func testImportStream(t *testing.T, open func(t *testing.T) upstream.Store) {
	const n = 4_500
	ctx := context.Background()
	s, si, f := openStreamImporter(t, open)
	give := streamFile(f, n)
	var got []upstream.Listing
	calls := 0
	stored, err := si.ImportStream(ctx, streamOf(give, nil), func(ls []upstream.Listing) error {
		calls++
		got = append(got, ls...)
		return nil
	})
	if err != nil || stored != n || len(got) != n {
		t.Fatalf("ImportStream() = %d, %v, with %d listings told; want %d", stored, err, len(got), n)
	}
	if calls < 2 {
		t.Fatalf("stored was called %d times for %d listings; want once per batch", calls, n)
	}
	nextNo := map[int64]int64{f.firmA.ID: 1, f.firmB.ID: 1}
	for i, l := range got {
		wantID := int64(i + 1)
		wantNo := nextNo[l.FirmID]
		if i == n-3 {
			wantID, wantNo = int64(10*n), int64(10*n)
		} else if i > n-3 {
			wantID = int64(10*n + i - (n - 3))
		}
		if l.FirmID != give[i].FirmID || l.ID != wantID || l.No != wantNo {
			t.Fatalf("entry %d stored as id %d, %s; want id %d, number %d of firm %d",
				i, l.ID, l.ListingID, wantID, wantNo, give[i].FirmID)
		}
		if i != n-3 {
			nextNo[l.FirmID]++
		}
	}
	for _, i := range []int{0, 2_001, n - 3, n - 1} {
		read, err := s.ListingByID(ctx, got[i].ID)
		if err != nil {
			t.Fatalf("ListingByID(%d) error = %v", got[i].ID, err)
		}
		requireSameListing(t, "ListingByID()", read, got[i])
	}
	// The counter moved past the file's last assigned number.
	next := mustImport(t, s, []upstream.Listing{f.listing(0, 0)})[0]
	if next.No != nextNo[f.firmA.ID] {
		t.Fatalf("after the stream, the next number of firm A is %d; want %d", next.No, nextNo[f.firmA.ID])
	}
}

// testImportStreamSkipsNumbersGivenBefore: a number given in one batch,
// above the firm's counter, is skipped when the next batch's counter
// reaches it, though the batch before may not be stored yet while the
// next is settled.
func testImportStreamSkipsNumbersGivenBefore(t *testing.T, open func(t *testing.T) upstream.Store) {
	const (
		n     = 4_500
		given = 1_990 // in the first batch: firm A's counter is near 1,700 there
		no    = 1_900 // reached in the second batch
	)
	ctx := context.Background()
	_, si, f := openStreamImporter(t, open)
	ls := streamFile(f, n)
	ls[given] = f.listing(0, no)
	var got []upstream.Listing
	if _, err := si.ImportStream(ctx, streamOf(ls, nil), func(stored []upstream.Listing) error {
		got = append(got, stored...)
		return nil
	}); err != nil {
		t.Fatalf("ImportStream() error = %v", err)
	}
	want := int64(1)
	for i, l := range got {
		if l.FirmID != f.firmA.ID || i == given || i == n-3 {
			continue
		}
		if want == no {
			want++ // given before
		}
		if l.No != want {
			t.Fatalf("entry %d got number %d; want %d, the counter's next past %d", i, l.No, want, no)
		}
		want++
	}
	if want <= no || got[given].No != no {
		t.Fatalf("the counter reached %d and entry %d has number %d; want past %d, and %d", want, given, got[given].No, no, no)
	}
}

// testImportStreamRejects checks that a fault in a later batch, one of the
// store's or one of the input's, names its entry and leaves nothing of the
// earlier batches behind.
func testImportStreamRejects(t *testing.T, open func(t *testing.T) upstream.Store) {
	const n = 4_500
	errInput := errors.New("the input broke")
	tests := []struct {
		name      string
		give      func(f fixture) iter.Seq2[upstream.Listing, error]
		wantIndex int // -1: the input's error
	}{
		{
			name: "given number assigned in an earlier batch",
			give: func(f fixture) iter.Seq2[upstream.Listing, error] {
				ls := streamFile(f, n)
				ls[n-10] = f.listing(0, 5) // firm A's 5th assigned number
				return streamOf(ls, nil)
			},
			wantIndex: n - 10,
		},
		{
			name: "given id stored in an earlier batch",
			give: func(f fixture) iter.Seq2[upstream.Listing, error] {
				ls := streamFile(f, n)
				ls[n-10] = f.listing(17, 0)
				return streamOf(ls, nil)
			},
			wantIndex: n - 10,
		},
		{
			name: "unknown firm in the last batch",
			give: func(f fixture) iter.Seq2[upstream.Listing, error] {
				ls := streamFile(f, n)
				ls[n-1].FirmID = f.unknownID
				return streamOf(ls, nil)
			},
			wantIndex: n - 1,
		},
		{
			name:      "the input fails",
			give:      func(f fixture) iter.Seq2[upstream.Listing, error] { return streamOf(streamFile(f, n), errInput) },
			wantIndex: -1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s, si, f := openStreamImporter(t, open)
			_, err := si.ImportStream(ctx, tt.give(f), nil)
			var ie *upstream.ImportError
			switch {
			case tt.wantIndex < 0 && err != errInput:
				t.Fatalf("ImportStream() error = %v; want the input's own", err)
			case tt.wantIndex >= 0 && (!errors.As(err, &ie) || ie.Index != tt.wantIndex):
				t.Fatalf("ImportStream() error = %v; want entry %d named", err, tt.wantIndex)
			}
			for _, id := range []int64{1, 2_500} {
				if _, err := s.ListingByID(ctx, id); !errors.Is(err, upstream.ErrNotFound) {
					t.Errorf("ListingByID(%d) after the rejected import: %v; want ErrNotFound", id, err)
				}
			}
			if l := mustImport(t, s, []upstream.Listing{f.listing(0, 0)})[0]; l.ID != 1 || l.No != 1 {
				t.Fatalf("after the rejected import, (id, no) = (%d, %d); want (1, 1)", l.ID, l.No)
			}
		})
	}
}

// openStreamImporter opens a seeded store, skipping the test where it does
// not stream imports.
func openStreamImporter(t *testing.T, open func(t *testing.T) upstream.Store) (upstream.Store, upstream.StreamImporter, fixture) {
	t.Helper()
	s := open(t)
	si, ok := s.(upstream.StreamImporter)
	if !ok {
		t.Skip("not a StreamImporter")
	}
	return s, si, seed(t, s)
}
