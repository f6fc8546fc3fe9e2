package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
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
// given or assigned: ids are assigned above the largest, so none is left
// after it; numbers from the firm's counter, so the largest one given
// leaves the rest free.
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
			name:     "number assigned after the largest stored",
			giveSeed: func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(0, top)} },
			give:     func(f fixture) []upstream.Listing { return []upstream.Listing{f.listing(0, 0)} },
			want:     []idNo{{2, 1}},
		},
		{
			name: "numbers assigned after the largest in the file",
			give: func(f fixture) []upstream.Listing {
				return []upstream.Listing{f.listing(0, top-1), f.listing(0, 0), f.listing(0, 0)}
			},
			want: []idNo{{1, top - 1}, {2, 1}, {3, 2}},
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
// included; a number that an older release stored past upstream.MaxNumber
// does not make the next one wrap; and the firm's counter (firms.next_no),
// however it was set, starts again from 1 past the bound and skips every
// number in use.
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

	// A number stored past the bound by an older release, which max + 1
	// would have wrapped around to a negative number: the counter takes a
	// free number instead. Rows written beside the store do not move the
	// counter, and are skipped.
	if err := run(insert(102, math.MaxInt64, false)); err != nil {
		t.Fatalf("insert no %d: %v", int64(math.MaxInt64), err)
	}
	next := func(want int64) {
		t.Helper()
		got, err := s.ImportListings(ctx, []upstream.Listing{f.listing(0, 0)})
		if err != nil || got[0].No != want {
			t.Fatalf("ImportListings() of an auto-numbered listing = %+v, %v; want number %d", got, err, want)
		}
		requireNoWrappedNumber(t, s, f.firmA.ID)
	}
	next(2)
	// A counter at the bound, or past it (set by hand), starts again from
	// 1, skipping what is in use.
	mustImport(t, s, []upstream.Listing{f.listing(0, upstream.MaxNumber)})
	for _, counter := range []int64{upstream.MaxNumber, upstream.MaxNumber + 1, math.MaxInt64, 0, -5} {
		if err := run(fmt.Sprintf(`UPDATE firms SET next_no = %d WHERE id = %d`, counter, f.firmA.ID)); err != nil {
			t.Fatalf("set the counter to %d: %v", counter, err)
		}
		var want int64
		switch counter {
		case upstream.MaxNumber:
			want = 3
		case upstream.MaxNumber + 1:
			want = 4
		case math.MaxInt64:
			want = 5
		case 0:
			want = 6
		default:
			want = 7
		}
		next(want)
	}
	// Past the numbers by hand, 50 and 51 (a tombstone) are skipped.
	if err := run(fmt.Sprintf(`UPDATE firms SET next_no = 50 WHERE id = %d`, f.firmA.ID)); err != nil {
		t.Fatal(err)
	}
	next(52)
}

// testNumberCounter checks the firm's counter of listing numbers: it
// starts at 1, skips every number in use (given ones, tombstones), and is
// not moved by given numbers.
func testNumberCounter(t *testing.T, open func(t *testing.T) upstream.Store) {
	const top = upstream.MaxNumber
	tests := []struct {
		name  string
		steps [][]int64 // numbers of successive imports of firm A; 0 is assigned
		want  []int64   // numbers of the last import
	}{
		{name: "after the largest number", steps: [][]int64{{top}, {0}, {0}}, want: []int64{2}},
		{name: "given numbers do not move it", steps: [][]int64{{100}, {0, 0}}, want: []int64{1, 2}},
		{name: "numbers in use are skipped", steps: [][]int64{{1, 2, 3, 5}, {0, 0, 0}}, want: []int64{4, 6, 7}},
		{name: "numbers given in the same file are skipped", steps: [][]int64{{0, 2, 0, 0}}, want: []int64{1, 2, 3, 4}},
		{name: "it moves on", steps: [][]int64{{0, 0}, {1000}, {0}}, want: []int64{3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			f := seed(t, s)
			var got []upstream.Listing
			for _, nos := range tt.steps {
				file := make([]upstream.Listing, len(nos))
				for i, no := range nos {
					file[i] = f.listing(0, no)
				}
				got = mustImport(t, s, file)
			}
			nos := make([]int64, len(got))
			for i, l := range got {
				nos[i] = l.No
				requireStored(t, s, l)
			}
			if !slices.Equal(nos, tt.want) {
				t.Fatalf("numbers of the last import = %v; want %v", nos, tt.want)
			}
		})
	}

	t.Run("tombstones are skipped", func(t *testing.T) {
		s := open(t)
		f := seed(t, s)
		l := mustImport(t, s, []upstream.Listing{f.listing(0, 1)})[0]
		mustDelete(t, s, f.firmA.ID, l.ID)
		if got := mustImport(t, s, []upstream.Listing{f.listing(0, 0)})[0]; got.No != 2 {
			t.Fatalf("number after the tombstone of 1 = %d; want 2", got.No)
		}
	})

	t.Run("per firm", func(t *testing.T) {
		s := open(t)
		f := seed(t, s)
		mustImport(t, s, []upstream.Listing{f.listing(0, 0), f.listing(0, 0)})
		if got := mustImport(t, s, []upstream.Listing{f.listingOfB(0, 0)})[0]; got.No != 1 {
			t.Fatalf("firm B's first number = %d; want 1", got.No)
		}
	})
}

// testConcurrentAutoNumbers creates auto-numbered listings one by one, as
// POST /realty does, from several goroutines at once, after a listing with
// the largest number: every create succeeds, and no number is given twice.
func testConcurrentAutoNumbers(t *testing.T, open func(t *testing.T) upstream.Store) {
	const creators, each = 4, 5
	s := open(t)
	f := seed(t, s)
	mustImport(t, s, []upstream.Listing{f.listing(0, upstream.MaxNumber)})
	var (
		mu   sync.Mutex
		nos  = map[int64]int{}
		errs []error
	)
	var wg sync.WaitGroup
	for range creators {
		wg.Go(func() {
			for range each {
				got, err := s.ImportListings(context.Background(), []upstream.Listing{f.listing(0, 0)})
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					nos[got[0].No]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("concurrent auto-numbered creates failed: %v", errors.Join(errs...))
	}
	for no, n := range nos {
		if n > 1 || no < 1 || no > creators*each {
			t.Fatalf("numbers given: %v; want each of 1…%d once", nos, creators*each)
		}
	}
	if len(nos) != creators*each {
		t.Fatalf("%d distinct numbers; want %d", len(nos), creators*each)
	}
}
