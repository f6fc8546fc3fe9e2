package cache

import (
	"math"
	"slices"
	"testing"
)

func TestNewListingsGiveBackWhatWasAdded(t *testing.T) {
	var want []Invalidation
	for i := range int64(2500) { // an import's run: ids and numbers one up
		want = append(want, Invalidation{ID: 1000 + i, FirmID: 7, No: 1 + i, Revision: 1})
	}
	want = append(want, // given ids and numbers, other firms, extremes
		Invalidation{ID: 3, FirmID: 2, No: 9, Revision: 4},
		Invalidation{ID: 1<<53 - 1, FirmID: math.MaxInt64, No: 1<<53 - 1, Revision: math.MaxInt64},
		Invalidation{ID: 1, FirmID: math.MinInt64, No: 1, Revision: 1},
		Invalidation{})
	var s newListings
	for _, it := range want {
		s.add(it)
	}
	for _, size := range []int{1, 1000, 5000} {
		var got []Invalidation
		for chunk := range s.chunks(size) {
			if len(chunk) == 0 || len(chunk) > size {
				t.Fatalf("size %d: a chunk of %d", size, len(chunk))
			}
			got = append(got, chunk...)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("size %d: got back %d listings, %v...; want %d, %v...", size, len(got), got[:min(3, len(got))], len(want), want[:3])
		}
	}
	if perListing := float64(len(s.buf)) / float64(len(want)); perListing > 5 {
		t.Fatalf("%.1f bytes a listing; want at most 5 for runs of ids and numbers", perListing)
	}
	var empty newListings
	for range empty.chunks(10) {
		t.Fatal("an empty list yielded a chunk")
	}
}
