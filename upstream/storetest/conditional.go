package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/realty-gateway/gateway/upstream"
)

// currentTag is the entity tag that a read of listing id answers.
func currentTag(t *testing.T, s upstream.Store, id int64) []byte {
	t.Helper()
	e, err := s.EncodedByID(context.Background(), id)
	if err != nil {
		t.Fatalf("EncodedByID(%d): %v", id, err)
	}
	return e.ETag
}

// weak is tag as a weak tag.
func weak(tag []byte) []byte { return append([]byte("W/"), tag...) }

// preconditionCase is a precondition and whether it holds.
type preconditionCase struct {
	name  string
	cond  upstream.Precondition
	holds bool
}

// currentModified is the Last-Modified, in unix seconds, that a read of
// listing id answers: the time the store recorded its revision.
func currentModified(t *testing.T, s upstream.Store, id int64) int64 {
	t.Helper()
	e, err := s.EncodedByID(context.Background(), id)
	if err != nil || e.Modified <= 0 {
		t.Fatalf("EncodedByID(%d): Modified %d, %v", id, e.Modified, err)
	}
	return e.Modified / 1000
}

// preconditionCases are the forms of RFC 9110 §13.1 that a write
// evaluates, against a stored listing whose tag is tag and whose
// Last-Modified is updatedSec (unix seconds; the time the store recorded
// its revision, not its updatedDate).
func preconditionCases(tag []byte, updatedSec int64) []preconditionCase {
	other := []byte(`"other"`)
	return []preconditionCase{
		{"none", upstream.Precondition{}, true},
		{"If-Match current", upstream.Precondition{IfMatch: [][]byte{tag}}, true},
		{"If-Match another", upstream.Precondition{IfMatch: [][]byte{other}}, false},
		{"If-Match list with current", upstream.Precondition{IfMatch: [][]byte{other, tag}}, true},
		{"If-Match weak current", upstream.Precondition{IfMatch: [][]byte{weak(tag)}}, false},
		{"If-Match *", upstream.Precondition{AnyMatch: true}, true},
		{"If-None-Match *", upstream.Precondition{AnyNoneMatch: true}, false},
		{"If-None-Match current", upstream.Precondition{IfNoneMatch: [][]byte{tag}}, false},
		{"If-None-Match weak current", upstream.Precondition{IfNoneMatch: [][]byte{weak(tag)}}, false},
		{"If-None-Match another", upstream.Precondition{IfNoneMatch: [][]byte{other}}, true},
		{"If-Unmodified-Since the update's second", upstream.Precondition{IfUnmodifiedSince: updatedSec}, true},
		{"If-Unmodified-Since later", upstream.Precondition{IfUnmodifiedSince: updatedSec + 60}, true},
		{"If-Unmodified-Since earlier", upstream.Precondition{IfUnmodifiedSince: updatedSec - 1}, false},
		{"If-Match wins over If-Unmodified-Since", upstream.Precondition{IfMatch: [][]byte{tag}, IfUnmodifiedSince: updatedSec - 1}, true},
		{"If-Match and a false If-None-Match", upstream.Precondition{IfMatch: [][]byte{tag}, IfNoneMatch: [][]byte{tag}}, false},
	}
}

// preconditionNamed is the case of that name, against tag.
func preconditionNamed(tag []byte, updatedSec int64, name string) preconditionCase {
	cases := preconditionCases(tag, updatedSec)
	return cases[slices.IndexFunc(cases, func(c preconditionCase) bool { return c.name == name })]
}

// testConditionalUpdate: an update writes where its precondition holds
// against the stored listing, and where it does not, fails with
// ErrPreconditionFailed and leaves the listing as it was.
func testConditionalUpdate(t *testing.T, open func(t *testing.T) upstream.Store) {
	s := open(t)
	f := seed(t, s)
	for _, tt := range preconditionCases(nil, 0) { // names only: each case seeds its own listing
		t.Run(tt.name, func(t *testing.T) {
			stored := seedWrite(t, s, f, 0)
			tag := currentTag(t, s, stored.ID)
			tc := preconditionNamed(tag, currentModified(t, s, stored.ID), tt.name)
			next := f.listing(stored.ID, 0)
			next.Title = "Conditional"
			got, err := s.UpdateListing(context.Background(), next, tc.cond)
			if !tc.holds {
				if !errors.Is(err, upstream.ErrPreconditionFailed) {
					t.Fatalf("UpdateListing() = %+v, %v; want ErrPreconditionFailed", got, err)
				}
				requireStored(t, s, stored)
				if after := currentTag(t, s, stored.ID); string(after) != string(tag) {
					t.Fatalf("tag %s after a refused write; want %s", after, tag)
				}
				return
			}
			if err != nil {
				t.Fatalf("UpdateListing() error = %v", err)
			}
			if got.Title != "Conditional" || got.Revision != stored.Revision+1 {
				t.Fatalf("UpdateListing() = title %q, revision %d; want Conditional, %d", got.Title, got.Revision, stored.Revision+1)
			}
			requireStored(t, s, got)
		})
	}
}

// testConditionalDelete: the same for deletes.
func testConditionalDelete(t *testing.T, open func(t *testing.T) upstream.Store) {
	s := open(t)
	f := seed(t, s)
	for _, tt := range preconditionCases(nil, 0) {
		t.Run(tt.name, func(t *testing.T) {
			stored := seedWrite(t, s, f, 0)
			tc := preconditionNamed(currentTag(t, s, stored.ID), currentModified(t, s, stored.ID), tt.name)
			got, err := s.DeleteListing(context.Background(), stored.FirmID, stored.ID, tc.cond)
			if !tc.holds {
				if !errors.Is(err, upstream.ErrPreconditionFailed) {
					t.Fatalf("DeleteListing() = %+v, %v; want ErrPreconditionFailed", got, err)
				}
				requireStored(t, s, stored)
				return
			}
			if err != nil {
				t.Fatalf("DeleteListing() error = %v", err)
			}
			requireGone(t, s, stored)
		})
	}
	t.Run("missing listing", func(t *testing.T) {
		// Nothing to compare with: not found, whatever the precondition.
		for _, cond := range []upstream.Precondition{{AnyMatch: true}, {AnyNoneMatch: true}, {IfMatch: [][]byte{[]byte(`"x"`)}}} {
			if _, err := s.DeleteListing(context.Background(), f.firmA.ID, f.unknownID, cond); !errors.Is(err, upstream.ErrNotFound) {
				t.Fatalf("DeleteListing(unknown, %+v) error = %v; want ErrNotFound", cond, err)
			}
			if _, err := s.UpdateListing(context.Background(), f.listing(f.unknownID, 0), cond); !errors.Is(err, upstream.ErrNotFound) {
				t.Fatalf("UpdateListing(unknown, %+v) error = %v; want ErrNotFound", cond, err)
			}
		}
	})
}

// testConcurrentConditionalUpdates: writers that all expect the same
// version race; exactly one writes, every other gets
// ErrPreconditionFailed, and the store holds the winner's listing.
func testConcurrentConditionalUpdates(t *testing.T, open func(t *testing.T) upstream.Store) {
	const writers = 8
	s := open(t)
	f := seed(t, s)
	for round := range 5 {
		stored := seedWrite(t, s, f, 0)
		cond := upstream.Precondition{IfMatch: [][]byte{currentTag(t, s, stored.ID)}}
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []upstream.Listing
			errs    []error
		)
		start := make(chan struct{})
		for i := range writers {
			wg.Go(func() {
				l := f.listing(stored.ID, 0)
				l.Title = fmt.Sprintf("Writer %d", i)
				<-start
				got, err := s.UpdateListing(context.Background(), l, cond)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					winners = append(winners, got)
				case !errors.Is(err, upstream.ErrPreconditionFailed):
					errs = append(errs, err)
				}
			})
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("round %d: errors other than ErrPreconditionFailed: %v", round, errors.Join(errs...))
		}
		if len(winners) != 1 {
			t.Fatalf("round %d: %d writers wrote with the same If-Match; want exactly 1", round, len(winners))
		}
		requireStored(t, s, winners[0])
	}
}

// testConditionalAfterOtherWriter: the tag compared is the one a read
// answers for the current version, whoever wrote it: after another
// writer's UPDATE in SQL, a write with the tag read before it fails, and
// one with the tag read after it succeeds.
func testConditionalAfterOtherWriter(t *testing.T, s FeedStore, exec Exec) {
	ctx := context.Background()
	f := seed(t, s)
	a := seedActive(t, s, f)
	before := currentTag(t, s, a.ID)
	if err := exec(ctx, `UPDATE listings SET document = REPLACE(document, '"title":"`+a.Title+`"', '"title":"By SQL"') WHERE id = $1`, a.ID); err != nil {
		t.Fatal(err)
	}
	next := a
	next.Title = "By the gateway"
	if _, err := s.UpdateListing(ctx, next, upstream.Precondition{IfMatch: [][]byte{before}}); !errors.Is(err, upstream.ErrPreconditionFailed) {
		t.Fatalf("a write with the tag read before another writer's UPDATE: error = %v; want ErrPreconditionFailed", err)
	}
	sqlWritten, err := s.ListingByID(ctx, a.ID)
	if err != nil || sqlWritten.Title != "By SQL" {
		t.Fatalf("after the refused write: %+v, %v; want the SQL writer's title", sqlWritten, err)
	}
	after := currentTag(t, s, a.ID)
	if string(after) == string(before) {
		t.Fatal("another writer's UPDATE left the tag as it was")
	}
	got, err := s.UpdateListing(ctx, next, upstream.Precondition{IfMatch: [][]byte{after}})
	if err != nil || got.Title != "By the gateway" {
		t.Fatalf("a write with the current tag: %+v, %v", got, err)
	}
	if _, err := s.DeleteListing(ctx, a.FirmID, a.ID, upstream.Precondition{IfMatch: [][]byte{after}}); !errors.Is(err, upstream.ErrPreconditionFailed) {
		t.Fatalf("a delete with the tag the gateway's write replaced: error = %v; want ErrPreconditionFailed", err)
	}
}
