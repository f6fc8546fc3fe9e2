package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/realty-gateway/gateway/upstream"
)

// RowCopies is an engine's view of a listing's row: whether it keeps a
// body beside its document, and the revision at which its document is its
// body (schema step 9), nil where none.
type RowCopies struct {
	Body                 bool
	DocumentBodyRevision *int64
	Revision             int64
}

// RequireImportKeepsOneCopy checks that imported rows, by the bulk path
// and alone, keep their bytes once: no body beside the document, which is
// marked as the body at the row's revision; that a read answers the
// document as a fresh encoding would, without encoding it again (which
// would keep a body in the row); and that a write's new version is read,
// not the imported document. row reads a row's copies by SQL.
func RequireImportKeepsOneCopy(t *testing.T, s upstream.Store, row func(id int64) RowCopies) {
	t.Helper()
	f := seed(t, s)
	var give []upstream.Listing
	for i := range 20 {
		l := f.listing(0, 0)
		l.Title = fmt.Sprintf("Flat %d", i)
		give = append(give, l)
	}
	stored := append(mustImport(t, s, give), mustImport(t, s, []upstream.Listing{f.listing(0, 0)})...)
	for round := range 2 { // the second: after reads
		for _, l := range stored {
			c := row(l.ID)
			if c.Body || c.DocumentBodyRevision == nil || *c.DocumentBodyRevision != c.Revision {
				t.Fatalf("read round %d: listing %d keeps a body beside its document: %t, document is the body at revision %v, row at %d; want one copy, at its revision",
					round, l.ID, c.Body, derefInt(c.DocumentBodyRevision), c.Revision)
			}
			requireFreshResponse(t, s, l.ID)
		}
	}
	next := stored[0]
	next.Title = "Written after the import"
	mustUpdate(t, s, next)
	if e := requireFreshResponse(t, s, next.ID); !containsTitle(e.Body, next.Title) {
		t.Fatalf("after a write, listing %d reads %s; want its new title", next.ID, e.Body)
	}
}

// requireFreshResponse checks that the response read for id is what a
// read encodes afresh, and returns it.
func requireFreshResponse(t *testing.T, s upstream.Store, id int64) upstream.Encoded {
	t.Helper()
	ctx := context.Background()
	kept, err := s.EncodedByID(ctx, id)
	if err != nil {
		t.Fatalf("EncodedByID(%d) error = %v", id, err)
	}
	read, err := s.ListingByID(ctx, id)
	if err != nil {
		t.Fatalf("ListingByID(%d) error = %v", id, err)
	}
	fresh, err := upstream.Encode(read)
	if err != nil {
		t.Fatal(err)
	}
	if string(kept.Body) != string(fresh.Body) || string(kept.ETag) != string(fresh.ETag) || kept.Revision != read.Revision {
		t.Fatalf("listing %d: read %s (%s, revision %d); a fresh encoding is %s (%s, revision %d)",
			id, kept.Body, kept.ETag, kept.Revision, fresh.Body, fresh.ETag, read.Revision)
	}
	return kept
}

func containsTitle(body []byte, title string) bool {
	return strings.Contains(string(body), `"title":"`+title+`"`)
}

func derefInt(p *int64) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}
