package storetest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

// Dates of the listing the update and delete tests start from.
const (
	writeCreated = 1_600_000_000_000
	writeUpdated = 1_600_000_500_000
)

// seedWrite imports the listing the update and delete tests start from:
// one of firm A, with dates in the past and the given updatedDate, when
// not zero.
func seedWrite(t *testing.T, s upstream.Store, f fixture, updated int64) upstream.Listing {
	t.Helper()
	l := f.listing(0, 0)
	l.CreatedDate, l.UpdatedDate = writeCreated, writeUpdated
	if updated != 0 {
		l.UpdatedDate = updated
	}
	return mustImport(t, s, []upstream.Listing{l})[0]
}

func mustUpdate(t *testing.T, s upstream.Store, l upstream.Listing) upstream.Listing {
	t.Helper()
	got, err := s.UpdateListing(context.Background(), l, upstream.Precondition{})
	if err != nil {
		t.Fatalf("UpdateListing(%d) error = %v", l.ID, err)
	}
	return got
}

func mustDelete(t *testing.T, s upstream.Store, firmID, id int64) upstream.Listing {
	t.Helper()
	got, err := s.DeleteListing(context.Background(), firmID, id, upstream.Precondition{})
	if err != nil {
		t.Fatalf("DeleteListing(%d, %d) error = %v", firmID, id, err)
	}
	return got
}

// requireStored checks that want is what both reads return.
func requireStored(t *testing.T, s upstream.Store, want upstream.Listing) {
	t.Helper()
	ctx := context.Background()
	byID, err := s.ListingByID(ctx, want.ID)
	if err != nil {
		t.Fatalf("ListingByID(%d) error = %v", want.ID, err)
	}
	requireSameListing(t, "ListingByID()", byID, want)
	byNumber, err := s.ListingByNumber(ctx, want.FirmID, want.No)
	if err != nil {
		t.Fatalf("ListingByNumber(%s) error = %v", want.ListingID, err)
	}
	requireSameListing(t, "ListingByNumber()", byNumber, want)
}

// requireGone checks that neither read finds listing l.
func requireGone(t *testing.T, s upstream.Store, l upstream.Listing) {
	t.Helper()
	ctx := context.Background()
	if got, err := s.ListingByID(ctx, l.ID); !errors.Is(err, upstream.ErrNotFound) {
		t.Fatalf("ListingByID(%d) = %+v, %v; want ErrNotFound", l.ID, got, err)
	}
	if got, err := s.ListingByNumber(ctx, l.FirmID, l.No); !errors.Is(err, upstream.ErrNotFound) {
		t.Fatalf("ListingByNumber(%s) = %+v, %v; want ErrNotFound", l.ListingID, got, err)
	}
}

func testUpdateListing(t *testing.T, open func(t *testing.T) upstream.Store) {
	future := time.Now().Add(time.Hour).UnixMilli()
	tests := []struct {
		name        string
		giveUpdated int64 // updatedDate of the stored listing; 0: writeUpdated
		give        func(f fixture, stored upstream.Listing) upstream.Listing
		wantUpdated int64 // 0: now
	}{
		{
			name: "every member, number given",
			give: func(f fixture, stored upstream.Listing) upstream.Listing {
				l := fullListing(f)
				l.ID, l.No = stored.ID, stored.No
				// Kept as stored whatever is given:
				l.FirmUserID, l.CreatedDate, l.UpdatedDate = f.otp.ID, 5, 6
				return l
			},
		},
		{
			name: "zero number keeps the number",
			give: func(f fixture, stored upstream.Listing) upstream.Listing {
				l := f.listing(stored.ID, 0)
				l.Title, l.IsActive, l.Note = "Renamed", true, new("new note")
				return l
			},
		},
		{
			name: "zero user and dates",
			give: func(f fixture, stored upstream.Listing) upstream.Listing {
				l := f.listing(stored.ID, stored.No)
				l.FirmUserID = 0
				return l
			},
		},
		{
			name:        "stored updatedDate ahead of the clock",
			giveUpdated: future,
			give: func(f fixture, stored upstream.Listing) upstream.Listing {
				return f.listing(stored.ID, 0)
			},
			wantUpdated: future + 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			f := seed(t, s)
			stored := seedWrite(t, s, f, tt.giveUpdated)
			give := tt.give(f, stored)

			before := time.Now().UnixMilli()
			got := mustUpdate(t, s, give)
			after := time.Now().UnixMilli()

			want := give
			want.ID, want.FirmID, want.No = stored.ID, stored.FirmID, stored.No
			want.FirmUserID, want.CreatedDate = stored.FirmUserID, stored.CreatedDate
			want.UpdatedDate = got.UpdatedDate // checked below
			want.Revision = 2
			want.Normalize()
			requireSameListing(t, "UpdateListing()", got, want)
			requireStored(t, s, got)

			switch {
			case tt.wantUpdated != 0 && got.UpdatedDate != tt.wantUpdated:
				t.Fatalf("updatedDate = %d; want %d", got.UpdatedDate, tt.wantUpdated)
			case tt.wantUpdated == 0 && (got.UpdatedDate < before || got.UpdatedDate > after):
				t.Fatalf("updatedDate = %d; want now, within [%d, %d]", got.UpdatedDate, before, after)
			}

			// Updates in a row, within a millisecond or not, keep raising
			// revision and updatedDate.
			prev := got
			for range 3 {
				next := mustUpdate(t, s, give)
				if next.Revision != prev.Revision+1 || next.UpdatedDate <= prev.UpdatedDate {
					t.Fatalf("next update: revision, updatedDate = %d, %d; want %d, more than %d",
						next.Revision, next.UpdatedDate, prev.Revision+1, prev.UpdatedDate)
				}
				prev = next
			}
			requireStored(t, s, prev)
		})
	}
}

func testUpdateRejects(t *testing.T, open func(t *testing.T) upstream.Store) {
	tests := []struct {
		name      string
		prepare   func(t *testing.T, s upstream.Store, f fixture, stored upstream.Listing)
		give      func(f fixture, stored upstream.Listing) upstream.Listing
		wantErr   error
		wantField string // the *ValidationError's field, if any
		wantGone  bool   // the stored listing is deleted
	}{
		{
			name:    "missing",
			give:    func(f fixture, stored upstream.Listing) upstream.Listing { return f.listing(stored.ID+100, 0) },
			wantErr: upstream.ErrNotFound,
		},
		{
			name:    "zero id",
			give:    func(f fixture, stored upstream.Listing) upstream.Listing { return f.listing(0, stored.No) },
			wantErr: upstream.ErrNotFound,
		},
		{
			name:    "another firm",
			give:    func(f fixture, stored upstream.Listing) upstream.Listing { return f.listingOfB(stored.ID, 0) },
			wantErr: upstream.ErrNotFound,
		},
		{
			name: "unknown firm",
			give: func(f fixture, stored upstream.Listing) upstream.Listing {
				l := f.listing(stored.ID, 0)
				l.FirmID = f.unknownID
				return l
			},
			wantErr: upstream.ErrNotFound,
		},
		{
			name: "deleted",
			prepare: func(t *testing.T, s upstream.Store, f fixture, stored upstream.Listing) {
				mustDelete(t, s, stored.FirmID, stored.ID)
			},
			give:     func(f fixture, stored upstream.Listing) upstream.Listing { return f.listing(stored.ID, 0) },
			wantErr:  upstream.ErrNotFound,
			wantGone: true,
		},
		{
			name:      "number changed",
			give:      func(f fixture, stored upstream.Listing) upstream.Listing { return f.listing(stored.ID, stored.No+1) },
			wantErr:   upstream.ErrInvalid,
			wantField: "no",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			f := seed(t, s)
			stored := seedWrite(t, s, f, 0)
			if tt.prepare != nil {
				tt.prepare(t, s, f, stored)
			}
			give := tt.give(f, stored)
			give.Title = "Changed"

			got, err := s.UpdateListing(ctx, give, upstream.Precondition{})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("UpdateListing() = %+v, %v; want %v", got, err, tt.wantErr)
			}
			var ve *upstream.ValidationError
			switch isVE := errors.As(err, &ve); {
			case tt.wantField == "" && isVE:
				t.Fatalf("UpdateListing() error = %v; want no *ValidationError", err)
			case tt.wantField != "" && !isVE:
				t.Fatalf("UpdateListing() error = %v; want a *ValidationError", err)
			case tt.wantField != "" && (len(ve.Fields) != 1 || ve.Fields[0].Field != tt.wantField):
				t.Fatalf("UpdateListing() fields = %+v; want one for %q", ve.Fields, tt.wantField)
			}

			if tt.wantGone {
				requireGone(t, s, stored)
			} else {
				requireStored(t, s, stored)
			}
			if give.No != 0 && give.No != stored.No {
				if _, err := s.ListingByNumber(ctx, give.FirmID, give.No); !errors.Is(err, upstream.ErrNotFound) {
					t.Fatalf("ListingByNumber(the rejected number) error = %v; want ErrNotFound", err)
				}
			}
		})
	}
}

func testDeleteListing(t *testing.T, open func(t *testing.T) upstream.Store) {
	tests := []struct {
		name         string
		prepare      func(t *testing.T, s upstream.Store, f fixture, stored upstream.Listing)
		giveFirm     func(f fixture) int64 // nil: firm A
		giveID       func(stored upstream.Listing) int64
		wantErr      error
		wantRevision int64
		wantKept     bool // on an error, the listing is still readable
	}{
		{name: "own listing", wantRevision: 2},
		{
			name: "after an update",
			prepare: func(t *testing.T, s upstream.Store, f fixture, stored upstream.Listing) {
				l := f.listing(stored.ID, 0)
				l.Title = "Updated"
				mustUpdate(t, s, l)
			},
			wantRevision: 3,
		},
		{
			name: "twice",
			prepare: func(t *testing.T, s upstream.Store, f fixture, stored upstream.Listing) {
				mustDelete(t, s, stored.FirmID, stored.ID)
			},
			wantErr: upstream.ErrNotFound,
		},
		{
			name:     "by another firm",
			giveFirm: func(f fixture) int64 { return f.firmB.ID },
			wantErr:  upstream.ErrNotFound,
			wantKept: true,
		},
		{
			name:     "by an unknown firm",
			giveFirm: func(f fixture) int64 { return f.unknownID },
			wantErr:  upstream.ErrNotFound,
			wantKept: true,
		},
		{
			name:     "missing",
			giveID:   func(stored upstream.Listing) int64 { return stored.ID + 100 },
			wantErr:  upstream.ErrNotFound,
			wantKept: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			f := seed(t, s)
			stored := seedWrite(t, s, f, 0)
			if tt.prepare != nil {
				tt.prepare(t, s, f, stored)
			}
			before, readErr := s.ListingByID(ctx, stored.ID) // the listing as it is now
			firmID, id := f.firmA.ID, stored.ID
			if tt.giveFirm != nil {
				firmID = tt.giveFirm(f)
			}
			if tt.giveID != nil {
				id = tt.giveID(stored)
			}

			got, err := s.DeleteListing(ctx, firmID, id, upstream.Precondition{})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("DeleteListing() = %+v, %v; want %v", got, err, tt.wantErr)
				}
				if tt.wantKept {
					requireStored(t, s, stored)
				} else {
					requireGone(t, s, stored)
				}
				return
			}
			if err != nil || readErr != nil {
				t.Fatalf("DeleteListing() error = %v (read before: %v)", err, readErr)
			}
			want := before
			want.Revision = tt.wantRevision
			requireSameListing(t, "DeleteListing()", got, want)
			requireGone(t, s, stored)

			if _, err := s.DeleteListing(ctx, firmID, id, upstream.Precondition{}); !errors.Is(err, upstream.ErrNotFound) {
				t.Fatalf("second DeleteListing() error = %v; want ErrNotFound", err)
			}
			if _, err := s.UpdateListing(ctx, f.listing(id, 0), upstream.Precondition{}); !errors.Is(err, upstream.ErrNotFound) {
				t.Fatalf("UpdateListing() after the delete: error = %v; want ErrNotFound", err)
			}
			requireGone(t, s, stored)
		})
	}
}

// testDeleteKeepsIDs checks that a tombstone's id and number are never
// given out again: firm A holds (1, 1) and the deleted (2, 2).
func testDeleteKeepsIDs(t *testing.T, open func(t *testing.T) upstream.Store) {
	tests := []struct {
		name    string
		give    func(f fixture) upstream.Listing
		want    idNo
		wantErr error
	}{
		{name: "deleted id", give: func(f fixture) upstream.Listing { return f.listing(2, 0) }, wantErr: upstream.ErrConflict},
		{name: "deleted number", give: func(f fixture) upstream.Listing { return f.listing(0, 2) }, wantErr: upstream.ErrConflict},
		{name: "deleted id and number", give: func(f fixture) upstream.Listing { return f.listing(2, 2) }, wantErr: upstream.ErrConflict},
		{name: "zero id and number after the largest", give: func(f fixture) upstream.Listing { return f.listing(0, 0) }, want: idNo{3, 3}},
		{name: "deleted number in another firm", give: func(f fixture) upstream.Listing { return f.listingOfB(0, 2) }, want: idNo{3, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			f := seed(t, s)
			seeded := mustImport(t, s, []upstream.Listing{f.listing(0, 0), f.listing(0, 0)})
			deleted := mustDelete(t, s, f.firmA.ID, seeded[1].ID)
			if deleted.ID != 2 || deleted.No != 2 {
				t.Fatalf("deleted (id, no) = (%d, %d); want (2, 2)", deleted.ID, deleted.No)
			}
			give := tt.give(f)

			got, err := s.ImportListings(ctx, []upstream.Listing{give})
			if tt.wantErr != nil {
				var ie *upstream.ImportError
				if !errors.As(err, &ie) || ie.Index != 0 || ie.ID != give.ID || !errors.Is(err, tt.wantErr) {
					t.Fatalf("ImportListings() = %v, %v; want an *ImportError for entry 0 (id %d), %v",
						got, err, give.ID, tt.wantErr)
				}
				requireGone(t, s, deleted)
				requireStored(t, s, seeded[0])
				return
			}
			if err != nil {
				t.Fatalf("ImportListings() error = %v", err)
			}
			if g := (idNo{got[0].ID, got[0].No}); g != tt.want {
				t.Fatalf("assigned (id, no) = %v; want %v", g, tt.want)
			}
			requireStored(t, s, got[0])
			requireGone(t, s, deleted)
		})
	}
}

func testConcurrentUpdates(t *testing.T, open func(t *testing.T) upstream.Store) {
	const writers = 10
	s := open(t)
	f := seed(t, s)
	stored := seedWrite(t, s, f, 0)

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex // guards results and errs
		results []upstream.Listing
		errs    []error
	)
	for i := range writers {
		wg.Go(func() {
			l := f.listing(stored.ID, 0)
			l.Title = fmt.Sprintf("Writer %d", i)
			got, err := s.UpdateListing(context.Background(), l, upstream.Precondition{})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			results = append(results, got)
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("concurrent UpdateListing() errors: %v", errors.Join(errs...))
	}
	sort.Slice(results, func(i, j int) bool { return results[i].Revision < results[j].Revision })
	for i, l := range results {
		if l.Revision != int64(i)+2 {
			t.Fatalf("revisions of the updates: #%d is %d; want 2 to %d, each once", i, l.Revision, writers+1)
		}
		if i > 0 && l.UpdatedDate <= results[i-1].UpdatedDate {
			t.Fatalf("revision %d has updatedDate %d, not after %d of revision %d",
				l.Revision, l.UpdatedDate, results[i-1].UpdatedDate, results[i-1].Revision)
		}
	}
	last := results[len(results)-1]
	if last.Revision != writers+1 {
		t.Fatalf("last revision = %d; want %d", last.Revision, writers+1)
	}
	requireStored(t, s, last)
}
