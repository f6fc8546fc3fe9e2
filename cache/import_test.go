package cache

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/coding"
	"github.com/realty-gateway/gateway/upstream"
	"github.com/realty-gateway/gateway/upstream/sqlite"
)

// TestImportStreamReplacesAbsences: an id and a number read (and their
// absence cached in Redis) before a streamed import is found once ImportStream returns, and the
// progress is told of every listing.
func TestImportStreamReplacesAbsences(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "gateway.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	firm, err := s.AddFirm(ctx, "Firm", []byte("digest"))
	if err != nil {
		t.Fatal(err)
	}
	user, err := s.AddUser(ctx, upstream.User{FirmID: firm.ID, Email: "a@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	c, _, _ := newRedisCache(t, s) // absences are cached in Redis only
	for _, k := range []Key{ByID(2), ByNumber(firm.ID, 2)} {
		if _, err := c.Get(ctx, k, coding.Identity, time.Now()); !errors.Is(err, upstream.ErrNotFound) {
			t.Fatalf("Get(%+v) before the import: %v; want ErrNotFound", k, err)
		}
	}
	const n = 3
	done := 0
	got, err := c.ImportStream(ctx, func(yield func(upstream.Listing, error) bool) {
		for range n {
			if !yield(upstream.Listing{Title: "new", FirmID: firm.ID, FirmUserID: user.ID, IsActive: true}, nil) {
				return
			}
		}
	}, func(k int) { done += k })
	if err != nil || got != n || done != n {
		t.Fatalf("ImportStream() = %d, %v, progress %d; want %d", got, err, done, n)
	}
	for _, k := range []Key{ByID(2), ByNumber(firm.ID, 2)} {
		if _, err := c.Get(ctx, k, coding.Identity, time.Now()); err != nil {
			t.Fatalf("Get(%+v) after the import: %v; want the imported listing", k, err)
		}
	}
}
