package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/realty-gateway/gateway/upstream"
)

// testConcurrentResponses: reads of responses made at once, which the
// store may answer in shared queries, each answer what the same read
// answers alone: the listing's response by id and by number, and
// ErrNotFound for a deleted or unknown listing, of either firm.
func testConcurrentResponses(t *testing.T, open func(t *testing.T) upstream.Store) {
	s := open(t)
	f := seed(t, s)
	ctx := context.Background()
	var ls []upstream.Listing
	for i := range int64(150) {
		l := f.listing(1000+i, 500+i)
		if i%3 == 0 {
			l = f.listingOfB(1000+i, 500+i) // the same numbers in both firms
		}
		l.Title = fmt.Sprintf("Flat %d", i)
		ls = append(ls, l)
	}
	ls = mustImport(t, s, ls)
	for _, l := range ls[:10] {
		mustDelete(t, s, l.FirmID, l.ID)
	}

	type read struct {
		name string
		call func(ctx context.Context) (upstream.Encoded, error)
	}
	var reads []read
	for _, l := range append(ls, f.listing(f.unknownID, f.unknownNo)) {
		reads = append(reads,
			read{fmt.Sprintf("id %d", l.ID), func(ctx context.Context) (upstream.Encoded, error) { return s.EncodedByID(ctx, l.ID) }},
			read{fmt.Sprintf("number %d-%d", l.FirmID, l.No), func(ctx context.Context) (upstream.Encoded, error) {
				return s.EncodedByNumber(ctx, l.FirmID, l.No)
			}},
			read{fmt.Sprintf("number %d-%d", f.firmA.ID+f.firmB.ID-l.FirmID, l.No), func(ctx context.Context) (upstream.Encoded, error) {
				return s.EncodedByNumber(ctx, f.firmA.ID+f.firmB.ID-l.FirmID, l.No) // the other firm's
			}})
	}
	type result struct {
		e   upstream.Encoded
		err error
	}
	alone := make([]result, len(reads))
	found := 0
	for i, r := range reads {
		e, err := r.call(ctx)
		if err != nil && !errors.Is(err, upstream.ErrNotFound) {
			t.Fatalf("%s alone: %v", r.name, err)
		}
		if err == nil {
			found++
		}
		alone[i] = result{e, err}
	}
	if want := 2 * 140; found < want { // 140 by id and number, and the other firm's where it has one
		t.Fatalf("%d reads found a listing alone; want at least %d", found, want)
	}

	for round := range 3 {
		var wg sync.WaitGroup
		got := make([]result, len(reads))
		for i, r := range reads {
			wg.Go(func() {
				e, err := r.call(ctx)
				got[i] = result{e, err}
			})
		}
		wg.Wait()
		for i, r := range reads {
			want := alone[i]
			switch {
			case want.err != nil && !errors.Is(got[i].err, upstream.ErrNotFound):
				t.Errorf("round %d, %s: %+v, %v; want ErrNotFound", round, r.name, got[i].e, got[i].err)
			case want.err == nil && (got[i].err != nil || !reflect.DeepEqual(got[i].e, want.e)):
				t.Errorf("round %d, %s: %+v, %v; want %+v", round, r.name, got[i].e, got[i].err, want.e)
			}
		}
	}
}
