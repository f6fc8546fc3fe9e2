package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/realty-gateway/gateway/upstream"
)

// requireNumberError checks that err rejects entry index of an import as a
// *upstream.ValidationError for field, and that it is not ErrConflict (a 409
// would tell the client its number is taken when it gave none).
func requireNumberError(t *testing.T, err error, index int, field string) {
	t.Helper()
	var (
		ie *upstream.ImportError
		ve *upstream.ValidationError
	)
	switch {
	case !errors.As(err, &ie) || ie.Index != index:
		t.Fatalf("ImportListings() error = %v; want an *ImportError for entry %d", err, index)
	case !errors.Is(err, upstream.ErrInvalid) || errors.Is(err, upstream.ErrConflict):
		t.Fatalf("ImportListings() error = %v; want ErrInvalid, not ErrConflict", err)
	case !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != field:
		t.Fatalf("ImportListings() error = %v; want a *ValidationError for field %q", err, field)
	}
}

// requireNoWrappedNumber checks that no listing of the firm took a number
// past the int64 maximum ("<firm>--9223372036854775808").
func requireNoWrappedNumber(t *testing.T, s upstream.Store, firmID int64) {
	t.Helper()
	if got, err := s.ListingByNumber(context.Background(), firmID, math.MinInt64); !errors.Is(err, upstream.ErrNotFound) {
		t.Fatalf("ListingByNumber(%d, MinInt64) = %+v, %v; want ErrNotFound", firmID, got, err)
	}
}

// testNumberLimits checks the bound upstream.MaxNumber on ids and numbers,
// given or assigned.
func testNumberLimits(t *testing.T, open func(t *testing.T) upstream.Store) {
	const top = upstream.MaxNumber
	tests := []struct {
		name      string
		giveSeed  func(f fixture) []upstream.Listing
		give      func(f fixture) []upstream.Listing
		want      []idNo // on success
		wantIndex int    // on an error: the entry at fault
		wantField string // on an error: "id" or "no"
	}{
		{
			name: "largest number given",
			give: func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(0, top)} },
			want: []idNo{{1, top}},
		},
		{
			name: "largest id given",
			give: func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(top, 0)} },
			want: []idNo{{top, 1}},
		},
		{
			name:      "number after the largest stored",
			giveSeed:  func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(0, top)} },
			give:      func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(0, 0)} },
			wantIndex: 0, wantField: "no",
		},
		{
			name: "number after the largest in the file",
			give: func(f fixture) []upstream.Listing {
				return []upstream.Listing{f.listing(0, top-1), f.listing(0, 0), f.listing(0, 0)}
			},
			wantIndex: 2, wantField: "no",
		},
		{
			name:      "id after the largest stored",
			giveSeed:  func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(top, 0)} },
			give:      func(f fixture) []upstream.Listing { return []upstream.Listing{f.listingOfB(0, 0)} },
			wantIndex: 0, wantField: "id",
		},
		{
			name:     "free number below the largest",
			giveSeed: func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(0, top)} },
			give:     func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(0, 2)} },
			want:     []idNo{{2, 2}},
		},
		{
			name:     "another firm still numbers",
			giveSeed: func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(0, top)} },
			give:     func(f fixture) []upstream.Listing { return []upstream.Listing{f.listingOfB(0, 0)} },
			want:     []idNo{{2, 1}},
		},
		{
			name:      "number above the largest",
			give:      func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(0, top+1)} },
			wantIndex: 0, wantField: "no",
		},
		{
			name:      "int64 maximum number",
			give:      func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(0, math.MaxInt64)} },
			wantIndex: 0, wantField: "no",
		},
		{
			name:      "negative number",
			give:      func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(0, -1)} },
			wantIndex: 0, wantField: "no",
		},
		{
			name:      "id above the largest",
			give:      func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(0, 1), f.listing(top+1, 0)} },
			wantIndex: 1, wantField: "id",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			f := seed(t, s)
			var seeded []upstream.Listing
			if tt.giveSeed != nil {
				seeded = mustImport(t, s, tt.giveSeed(f))
			}
			give := tt.give(f)
			got, err := s.ImportListings(context.Background(), give)
			if tt.wantField != "" {
				requireNumberError(t, err, tt.wantIndex, tt.wantField)
				requireUnchanged(t, s, seeded, give)
				requireNoWrappedNumber(t, s, f.firmA.ID)
				requireNoWrappedNumber(t, s, f.firmB.ID)
				return
			}
			if err != nil {
				t.Fatalf("ImportListings() error = %v", err)
			}
			assigned := make([]idNo, len(got))
			for i, l := range got {
				assigned[i] = idNo{l.ID, l.No}
				requireStored(t, s, l)
			}
			if !slices.Equal(assigned, tt.want) {
				t.Fatalf("assigned (id, no) = %v; want %v", assigned, tt.want)
			}
		})
	}
}

// CheckNumberConstraint checks the schema's own guard on listing numbers,
// below the store: exec is the driver's own Exec of a connection to the
// database of the fresh store s, outside it (*sql.DB.ExecContext,
// *pgx.Conn.Exec). A number of 0 or less is refused by the CHECK
// constraint listings_no_positive, on insert and on update, tombstones
// included; and a number that an older release stored past
// upstream.MaxNumber leaves no number to assign, rather than a wrapped one.
// The SQL is common to SQLite and PostgreSQL.
func CheckNumberConstraint[Result any](t *testing.T, s upstream.Store,
	exec func(ctx context.Context, stmt string, args ...any) (Result, error),
) {
	t.Helper()
	ctx := context.Background()
	run := func(stmt string) error {
		_, err := exec(ctx, stmt)
		return err
	}
	f := seed(t, s)
	stored := mustImport(t, s, []upstream.Listing{f.listing(0, 0)})[0]

	insert := func(id, no int64, deleted bool) string {
		l := f.listing(id, no)
		l.Revision = 1
		l.Normalize()
		return fmt.Sprintf(`INSERT INTO listings (id, firm_id, no, firm_user_id, is_active, revision, document, deleted)
			VALUES (%d, %d, %d, %d, false, 1, '%s', %t)`, id, f.firmA.ID, no, f.alice.ID, mustJSON(t, l), deleted)
	}
	update := func(no int64) string {
		return fmt.Sprintf(`UPDATE listings SET no = %d WHERE id = %d`, no, stored.ID)
	}

	// The statements are well-formed: with a valid number they run.
	for _, stmt := range []string{insert(100, 50, false), insert(101, 51, true), update(stored.No)} {
		if err := run(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	// The UPDATE left the revision alone; the change feed's trigger raised
	// it, so that it wins over any cached copy.
	stored.Revision++
	tests := []struct {
		name string
		give string
	}{
		{name: "insert 0", give: insert(200, 0, false)},
		{name: "insert -1", give: insert(201, -1, false)},
		{name: "insert a tombstone with 0", give: insert(202, 0, true)},
		{name: "update to 0", give: update(0)},
		{name: "update to the int64 minimum", give: update(math.MinInt64)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(tt.give)
			if err == nil || !strings.Contains(err.Error(), "listings_no_positive") {
				t.Fatalf("%s: error = %v; want a violation of listings_no_positive", tt.give, err)
			}
		})
	}
	requireStored(t, s, stored)

	// A number stored past the bound by an older release: the next one
	// would wrap around to a negative number.
	if err := run(insert(102, math.MaxInt64, false)); err != nil {
		t.Fatalf("insert no %d: %v", int64(math.MaxInt64), err)
	}
	_, err := s.ImportListings(ctx, []upstream.Listing{f.listing(0, 0)})
	requireNumberError(t, err, 0, "no")
	requireNoWrappedNumber(t, s, f.firmA.ID)
}
