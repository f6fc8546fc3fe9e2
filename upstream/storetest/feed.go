package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

// FeedStore is a store with a change feed.
type FeedStore interface {
	upstream.Store
	upstream.Feed
}

// Exec runs a statement on the store's database as a writer other than
// the gateway would: the listing application, an operator's SQL.
type Exec func(ctx context.Context, stmt string, args ...any) error

// RunFeed runs the change feed's conformance suite. open returns a fresh,
// empty store, and the Exec of another writer on its database.
func RunFeed(t *testing.T, open func(t *testing.T) (FeedStore, Exec)) {
	suite := []struct {
		name string
		run  func(t *testing.T, s FeedStore, exec Exec)
	}{
		{"OwnWritesRecorded", testFeedOwnWrites},
		{"OtherWritersRecorded", testFeedOtherWriters},
		{"RemovedRowComesBackHigher", testFeedRemovedRow},
		{"MultiRowInsert", testFeedMultiRowInsert},
		{"ImportAboveRemovedRow", testFeedImportAboveRemovedRow},
		{"OneConsumer", testFeedOneConsumer},
		{"AwaitUndone", testFeedAwaitUndone},
		{"ApplyAndPrune", testFeedApplyAndPrune},
		{"AdoptReplays", testFeedAdoptReplays},
		{"AdoptReplaysManyChanges", testFeedAdoptReplaysManyChanges},
		{"Settle", testFeedSettle},
		{"StoredBodies", testStoredBodies},
		{"ImportedBodiesNotStale", testImportedBodiesNotStale},
		{"ConditionalAfterOtherWriter", testConditionalAfterOtherWriter},
		{"Modified", testModified},
	}
	for _, tt := range suite {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, exec := open(t)
			tt.run(t, s, exec)
		})
	}
}

func allChanges(t *testing.T, s FeedStore) []upstream.Change {
	t.Helper()
	ctx := context.Background()
	p, err := s.Position(ctx)
	if err != nil {
		t.Fatalf("Position: %v", err)
	}
	cs, err := s.Unapplied(ctx, p.LastSeq, 1000)
	if err != nil {
		t.Fatalf("Unapplied: %v", err)
	}
	return cs
}

// requireChange checks the parts of c that say what happened.
func requireChange(t *testing.T, c upstream.Change, want upstream.Change) {
	t.Helper()
	got := c
	got.Seq, got.ChangedAt, got.Applied, got.Replayed = 0, time.Time{}, false, false
	if got != want {
		t.Fatalf("change = %+v; want %+v", got, want)
	}
	if d := time.Since(c.ChangedAt); d < -time.Minute || d > time.Minute {
		t.Fatalf("change made at %v, %v from now; want the database's now", c.ChangedAt, d)
	}
}

// seedActive imports an active listing of firm A.
func seedActive(t *testing.T, s upstream.Store, f fixture) upstream.Listing {
	t.Helper()
	l := f.listing(0, 0)
	l.IsActive = true
	return mustImport(t, s, []upstream.Listing{l})[0]
}

func mustAcquire(t *testing.T, s FeedStore) upstream.FeedSession {
	t.Helper()
	ctx := context.Background()
	fs, err := s.Acquire(ctx, t.Name())
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() { _ = fs.Close(context.Background()) })
	return fs
}

func seqs(cs []upstream.Change) []int64 {
	out := make([]int64, len(cs))
	for i, c := range cs {
		out[i] = c.Seq
	}
	return out
}

// testFeedOwnWrites: the gateway's own writes are recorded with the
// revisions they return, which the triggers leave as they are.
func testFeedOwnWrites(t *testing.T, s FeedStore, _ Exec) {
	f := seed(t, s)
	created := seedActive(t, s, f)
	passive := created
	passive.IsActive = false
	updated := mustUpdate(t, s, passive)
	deleted := mustDelete(t, s, f.firmA.ID, created.ID)
	if created.Revision != 1 || updated.Revision != 2 || deleted.Revision != 3 {
		t.Fatalf("revisions %d, %d, %d; want 1, 2, 3 (the triggers must not change the gateway's)",
			created.Revision, updated.Revision, deleted.Revision)
	}
	cs := allChanges(t, s)
	if len(cs) != 3 {
		t.Fatalf("changes = %+v; want 3", cs)
	}
	base := upstream.Change{ListingID: created.ID, FirmID: f.firmA.ID, No: created.No}
	want := []upstream.Change{base, base, base}
	want[0].Revision, want[0].VisibleAfter = 1, true
	want[1].Revision, want[1].VisibleBefore = 2, true
	want[2].Revision, want[2].Deleted = 3, true
	for i := range cs {
		requireChange(t, cs[i], want[i])
	}
	if !(cs[0].Seq < cs[1].Seq && cs[1].Seq < cs[2].Seq) {
		t.Fatalf("sequence numbers %v do not grow", seqs(cs))
	}
}

// testFeedOtherWriters: writes in SQL that leave the revision alone still
// raise it, the columns they change win over the document, and a move to
// another number records the old one.
func testFeedOtherWriters(t *testing.T, s FeedStore, exec Exec) {
	ctx := context.Background()
	f := seed(t, s)
	l := seedActive(t, s, f)
	run := func(stmt string, args ...any) {
		t.Helper()
		if err := exec(ctx, stmt, args...); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	run(`UPDATE listings SET document = replace(document, '"title":"Flat"', '"title":"Changed"') WHERE id = $1`, l.ID)
	got, err := s.ListingByID(ctx, l.ID)
	if err != nil || got.Title != "Changed" || got.Revision != 2 {
		t.Fatalf("after an UPDATE of the document: %+v, %v; want title Changed, revision 2", got, err)
	}
	run(`UPDATE listings SET revision = 1 WHERE id = $1`, l.ID)
	run(`UPDATE listings SET is_active = (1 = 0) WHERE id = $1`, l.ID)
	got, err = s.ListingByID(ctx, l.ID)
	if err != nil || got.IsActive || got.Revision != 4 {
		t.Fatalf("after lowering the revision and deactivating: %+v, %v; want passive, revision 4", got, err)
	}
	run(`UPDATE listings SET no = 77 WHERE id = $1`, l.ID)
	got, err = s.ListingByNumber(ctx, f.firmA.ID, 77)
	if err != nil || got.ID != l.ID || got.ListingID != upstream.ListingNumber(f.firmA.ID, 77) || got.Revision != 5 {
		t.Fatalf("after the move to number 77: %+v, %v; want listing %d as %d-77, revision 5", got, err, l.ID, f.firmA.ID)
	}

	cs := allChanges(t, s)
	if len(cs) != 5 {
		t.Fatalf("changes = %+v; want 5", cs)
	}
	base := upstream.Change{ListingID: l.ID, FirmID: f.firmA.ID, No: l.No}
	want := make([]upstream.Change, 5)
	for i := range want {
		want[i] = base
		want[i].Revision = int64(i + 1)
	}
	want[0].VisibleAfter = true
	want[1].VisibleBefore, want[1].VisibleAfter = true, true
	want[2].VisibleBefore, want[2].VisibleAfter = true, true
	want[3].VisibleBefore = true
	want[4].No, want[4].OldFirmID, want[4].OldNo = 77, f.firmA.ID, l.No
	for i := range cs {
		requireChange(t, cs[i], want[i])
	}
}

// testFeedRemovedRow: a row removed with DELETE is recorded as deleted, and
// a row inserted again under its id continues above its revisions, so that
// it wins over every copy cached of the removed one.
func testFeedRemovedRow(t *testing.T, s FeedStore, exec Exec) {
	ctx := context.Background()
	f := seed(t, s)
	l := seedActive(t, s, f)
	l = mustUpdate(t, s, l)
	if err := exec(ctx, `DELETE FROM listings WHERE id = $1`, l.ID); err != nil {
		t.Fatal(err)
	}
	requireGone(t, s, l)
	doc := string(mustJSON(t, l))
	if err := exec(ctx, `INSERT INTO listings (id, firm_id, no, firm_user_id, is_active, revision, document)
		VALUES ($1, $2, $3, $4, (1 = 1), 1, $5)`, l.ID, l.FirmID, l.No, l.FirmUserID, doc); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListingByID(ctx, l.ID)
	if err != nil || got.Revision != 4 {
		t.Fatalf("reinserted listing = %+v, %v; want revision 4, above the removal's 3", got, err)
	}
	cs := allChanges(t, s)
	removal := slices.IndexFunc(cs, func(c upstream.Change) bool { return c.Deleted })
	if removal < 0 || cs[removal].Revision != 3 || !cs[removal].VisibleBefore || cs[removal].VisibleAfter {
		t.Fatalf("changes = %+v; want the removal as deleted, revision 3, visible before only", cs)
	}
	last := cs[len(cs)-1]
	if last.Deleted || !last.VisibleAfter || last.Revision != 4 {
		t.Fatalf("last change = %+v; want the reinsert, visible, revision 4", last)
	}
}

// testFeedImportAboveRemovedRow: an import under the id of a removed row,
// given or assigned, returns the revision the store keeps, above the
// removal's: the gateway caches and floors the listing at it.
func testFeedImportAboveRemovedRow(t *testing.T, s FeedStore, exec Exec) {
	ctx := context.Background()
	f := seed(t, s)
	given := mustUpdate(t, s, seedActive(t, s, f)) // revision 2, removed at 3
	last := seedActive(t, s, f)                    // the largest id, removed at 2
	for _, l := range []upstream.Listing{given, last} {
		if err := exec(ctx, `DELETE FROM listings WHERE id = $1`, l.ID); err != nil {
			t.Fatal(err)
		}
	}
	got := mustImport(t, s, []upstream.Listing{f.listing(given.ID, 0), f.listing(0, 0)})
	want := map[int64]int64{given.ID: 4, last.ID: 3}
	if len(got) != 2 || got[1].ID != last.ID {
		t.Fatalf("imported %+v; want ids %d and %d, the second assigned the removed largest", got, given.ID, last.ID)
	}
	for _, l := range got {
		stored, err := s.ListingByID(ctx, l.ID)
		if err != nil || l.Revision != want[l.ID] || stored.Revision != want[l.ID] {
			t.Fatalf("imported listing %d: returned revision %d, stored %d (%v); want %d for both (ids %d and %d removed)",
				l.ID, l.Revision, stored.Revision, err, want[l.ID], given.ID, last.ID)
		}
	}
}

// testFeedMultiRowInsert: one statement of another writer that inserts
// several rows, some under the ids of removed ones, records every row, and
// each comes back above its removed one's revisions.
func testFeedMultiRowInsert(t *testing.T, s FeedStore, exec Exec) {
	ctx := context.Background()
	f := seed(t, s)
	removed := []upstream.Listing{mustUpdate(t, s, seedActive(t, s, f)), seedActive(t, s, f)} // revisions 2 and 1
	for _, l := range removed {
		if err := exec(ctx, `DELETE FROM listings WHERE id = $1`, l.ID); err != nil {
			t.Fatal(err)
		}
	}
	before := len(allChanges(t, s))
	fresh := f.listing(0, 0)
	fresh.ID, fresh.No = removed[1].ID+100, removed[1].No+100
	rows := []upstream.Listing{removed[0], fresh, removed[1]}
	var values []string
	var args []any
	for i, l := range rows {
		values = append(values, fmt.Sprintf("($%d, $%d, $%d, $%d, (1 = 1), 1, $%d)", 5*i+1, 5*i+2, 5*i+3, 5*i+4, 5*i+5))
		args = append(args, l.ID, l.FirmID, l.No, l.FirmUserID, string(mustJSON(t, l)))
	}
	if err := exec(ctx, `INSERT INTO listings (id, firm_id, no, firm_user_id, is_active, revision, document) VALUES `+
		strings.Join(values, ", "), args...); err != nil {
		t.Fatal(err)
	}
	want := map[int64]int64{removed[0].ID: 4, fresh.ID: 1, removed[1].ID: 3} // above each removal's revision
	for id, rev := range want {
		if got, err := s.ListingByID(ctx, id); err != nil || got.Revision != rev {
			t.Fatalf("listing %d inserted = revision %d, %v; want %d", id, got.Revision, err, rev)
		}
	}
	recorded := map[int64]int64{} // the last revision recorded per listing
	for _, c := range allChanges(t, s)[before:] {
		if c.Deleted || !c.VisibleAfter {
			t.Fatalf("change %+v after the insert; want the listing visible", c)
		}
		recorded[c.ListingID] = c.Revision
	}
	if !maps.Equal(recorded, want) {
		t.Fatalf("the insert recorded last revisions %v; want %v", recorded, want)
	}
}

// testFeedOneConsumer: one holder at a time; a closed session frees the
// feed at once.
func testFeedOneConsumer(t *testing.T, s FeedStore, _ Exec) {
	ctx := context.Background()
	first := mustAcquire(t, s)
	if first.Lease() <= 0 {
		t.Fatalf("Lease() = %v; want positive", first.Lease())
	}
	if _, err := s.Acquire(ctx, "second"); !errors.Is(err, upstream.ErrNotConsumer) {
		t.Fatalf("second Acquire: error = %v; want ErrNotConsumer", err)
	}
	if err := first.Renew(ctx); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	second := mustAcquire(t, s)
	if err := second.Renew(ctx); err != nil {
		t.Fatalf("Renew of the second holder: %v", err)
	}
}

// testFeedAwaitUndone: the idle consumer's wait says false once its bound
// has passed without a change, true at once while a change is undone and
// soon after another writer commits one, and ends with its context,
// leaving the hold as it was.
func testFeedAwaitUndone(t *testing.T, s FeedStore, exec Exec) {
	ctx := context.Background()
	l := seedActive(t, s, seed(t, s))
	fs := mustAcquire(t, s)
	markAllDone := func() {
		t.Helper()
		cs, err := fs.Pending(ctx, 0, 1000)
		if err == nil {
			err = fs.MarkApplied(ctx, seqs(cs), true)
		}
		if err != nil {
			t.Fatalf("marking every change done: %v", err)
		}
	}
	await := func(ctx context.Context, wait time.Duration) (bool, time.Duration, error) {
		began := time.Now()
		undone, err := fs.AwaitUndone(ctx, wait)
		return undone, time.Since(began), err
	}
	if undone, took, err := await(ctx, time.Minute); err != nil || !undone || took > 10*time.Second {
		t.Fatalf("AwaitUndone with a change undone = %v, %v after %v; want true at once", undone, err, took)
	}
	markAllDone()
	if undone, _, err := await(ctx, 0); err != nil || undone {
		t.Fatalf("AwaitUndone(0) with every change done = %v, %v; want false", undone, err)
	}
	if undone, took, err := await(ctx, 500*time.Millisecond); err != nil || undone || took < 250*time.Millisecond {
		t.Fatalf("AwaitUndone(500ms) with nothing to do = %v, %v after %v; want false after its wait", undone, err, took)
	}

	written := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		written <- exec(ctx, `UPDATE listings SET is_active = (1 = 0) WHERE id = $1`, l.ID)
	}()
	undone, took, err := await(ctx, time.Minute)
	if werr := <-written; werr != nil {
		t.Fatalf("another writer's UPDATE: %v", werr)
	}
	if err != nil || !undone || took > 20*time.Second {
		t.Fatalf("AwaitUndone(1m) while another writer commits = %v, %v after %v; want true soon after the commit", undone, err, took)
	}

	markAllDone()
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, took, err := await(cctx, time.Minute); err == nil || took > 20*time.Second {
		t.Fatalf("AwaitUndone(1m) whose context ends after 300 ms: error %v after %v; want the context's error", err, took)
	}
	if err := fs.Renew(ctx); err != nil {
		t.Fatalf("Renew after a wait that its context ended: %v; want the hold as it was", err)
	}
	if undone, _, err := await(ctx, 0); err != nil || undone {
		t.Fatalf("AwaitUndone(0) after a wait that its context ended = %v, %v; want false", undone, err)
	}
}

// testFeedApplyAndPrune walks changes through the consumer's steps.
func testFeedApplyAndPrune(t *testing.T, s FeedStore, exec Exec) {
	ctx := context.Background()
	f := seed(t, s)
	live := seedActive(t, s, f)
	tomb := seedActive(t, s, f)
	mustDelete(t, s, f.firmA.ID, tomb.ID)
	gone := seedActive(t, s, f)
	if err := exec(ctx, `DELETE FROM listings WHERE id = $1`, gone.ID); err != nil {
		t.Fatal(err)
	}
	fs := mustAcquire(t, s)

	if cs, err := fs.Pending(ctx, time.Hour, 100); err != nil || len(cs) != 0 {
		t.Fatalf("Pending(settle 1h) = %+v, %v; want none: every change is younger", cs, err)
	}
	cs, err := fs.Pending(ctx, 0, 100)
	if err != nil || len(cs) != 5 {
		t.Fatalf("Pending(0) = %+v, %v; want 5", cs, err)
	}
	if rows, lag, err := fs.Backlog(ctx); err != nil || rows != 5 || lag < 0 || lag > time.Minute {
		t.Fatalf("Backlog() = %d, %v, %v; want 5 rows", rows, lag, err)
	}
	states, err := fs.Listings(ctx, []int64{live.ID, tomb.ID, gone.ID})
	if err != nil {
		t.Fatalf("Listings: %v", err)
	}
	if st := states[live.ID]; st.Deleted || st.Gone || st.Listing.Title != live.Title || st.Listing.Revision != 1 || st.Listing.ListingID != live.ListingID {
		t.Fatalf("state of the live listing = %+v", st)
	}
	if st := states[tomb.ID]; !st.Deleted || st.Gone || st.Listing.No != tomb.No || st.Listing.Revision != 2 {
		t.Fatalf("state of the tombstone = %+v; want deleted, its number, revision 2", st)
	}
	if st := states[gone.ID]; !st.Gone || st.Listing.ID != gone.ID {
		t.Fatalf("state of the removed row = %+v; want gone", st)
	}

	if err := fs.MarkApplied(ctx, seqs(cs[:2]), false); err != nil {
		t.Fatalf("MarkApplied: %v", err)
	}
	if err := fs.MarkApplied(ctx, seqs(cs[2:]), true); err != nil {
		t.Fatalf("MarkApplied(done): %v", err)
	}
	if rest, err := fs.Pending(ctx, 0, 100); err != nil || len(rest) != 0 {
		t.Fatalf("Pending after MarkApplied = %+v, %v; want none", rest, err)
	}
	unpurged, err := fs.Unpurged(ctx, 0, 100)
	if err != nil || !slices.Equal(seqs(unpurged), seqs(cs[:2])) || !unpurged[0].Applied {
		t.Fatalf("Unpurged(0) = %+v, %v; want the 2 applied but not done", unpurged, err)
	}
	if later, err := fs.Unpurged(ctx, time.Hour, 100); err != nil || len(later) != 0 {
		t.Fatalf("Unpurged(1h) = %+v, %v; want none applied that long ago", later, err)
	}
	time.Sleep(5 * time.Millisecond) // Prune keeps what was made within keep, now included
	if n, err := fs.Prune(ctx, 0, 100); err != nil || n != 3 {
		t.Fatalf("Prune = %d, %v; want the 3 done", n, err)
	}
	if err := fs.MarkDone(ctx, seqs(cs[:2])); err != nil {
		t.Fatalf("MarkDone: %v", err)
	}
	if n, err := fs.Prune(ctx, time.Hour, 100); err != nil || n != 0 {
		t.Fatalf("Prune(keep 1h) = %d, %v; want none", n, err)
	}
	if n, err := fs.Prune(ctx, 0, 1); err != nil || n != 1 {
		t.Fatalf("Prune(limit 1) = %d, %v; want 1", n, err)
	}
	if rows, lag, err := fs.Backlog(ctx); err != nil || rows != 0 || lag != 0 {
		t.Fatalf("Backlog() at the end = %d, %v, %v; want 0, 0", rows, lag, err)
	}

	// A document that another writer broke is cached nowhere.
	bad := seedActive(t, s, f)
	if err := exec(ctx, `UPDATE listings SET document = 'not JSON' WHERE id = $1`, bad.ID); err != nil {
		t.Fatal(err)
	}
	states, err = fs.Listings(ctx, []int64{bad.ID})
	if st := states[bad.ID]; err != nil || !st.Gone || st.Listing.No != bad.No || st.Listing.Revision != 2 {
		t.Fatalf("state of an unreadable document = %+v, %v; want gone, with its number and revision", st, err)
	}
}

// testFeedAdoptReplays: a new Redis gets every change of the window again;
// the same Redis nothing.
func testFeedAdoptReplays(t *testing.T, s FeedStore, _ Exec) {
	ctx := context.Background()
	f := seed(t, s)
	seedActive(t, s, f)
	seedActive(t, s, f)
	fs := mustAcquire(t, s)
	cs, err := fs.Pending(ctx, 0, 100)
	if err != nil || len(cs) != 2 {
		t.Fatalf("Pending = %+v, %v", cs, err)
	}
	if n, err := fs.Adopt(ctx, "redis-1", time.Hour); err != nil || n != 0 {
		t.Fatalf("first Adopt = %d, %v; want nothing applied yet to replay", n, err)
	}
	if err := fs.MarkApplied(ctx, seqs(cs), true); err != nil {
		t.Fatal(err)
	}
	if n, err := fs.Adopt(ctx, "redis-1", time.Hour); err != nil || n != 0 {
		t.Fatalf("Adopt of the same Redis = %d, %v; want 0", n, err)
	}
	if p, err := s.Position(ctx); err != nil || p.RedisIdentity != "redis-1" || p.LastSeq != cs[1].Seq {
		t.Fatalf("Position = %+v, %v; want redis-1 at %d", p, err, cs[1].Seq)
	}
	if n, err := fs.Adopt(ctx, "redis-2", time.Hour); err != nil || n != 2 {
		t.Fatalf("Adopt of another Redis = %d, %v; want both replayed", n, err)
	}
	if caught, err := s.CaughtUp(ctx, cs[1].Seq); err != nil || caught {
		t.Fatalf("CaughtUp after the replay = %v, %v; want false", caught, err)
	}
	again, err := fs.Pending(ctx, 0, 100)
	if err != nil || !slices.Equal(seqs(again), seqs(cs)) || !again[0].Replayed || !again[1].Replayed {
		t.Fatalf("Pending after the replay = %+v, %v; want %v, replayed", again, err, seqs(cs))
	}
	time.Sleep(5 * time.Millisecond) // the window reaches back to now, included
	if n, err := fs.Adopt(ctx, "redis-3", 0); err != nil || n != 0 {
		t.Fatalf("Adopt with an empty window = %d, %v; want 0", n, err)
	}
}

// testFeedAdoptReplaysManyChanges: a window of more changes than one of
// Adopt's transactions marks (the stores mark 2,000 at a time) replays
// whole, and a replay cut short goes on where it stopped.
func testFeedAdoptReplaysManyChanges(t *testing.T, s FeedStore, exec Exec) {
	ctx := context.Background()
	f := seed(t, s)
	seedActive(t, s, f)
	fs := mustAcquire(t, s)
	cs, err := fs.Pending(ctx, 0, 10)
	if err != nil || len(cs) != 1 {
		t.Fatalf("Pending = %+v, %v; want the one change", cs, err)
	}
	if _, err := fs.Adopt(ctx, "redis-1", time.Hour); err != nil {
		t.Fatal(err)
	}
	const copies, cutAt = 4500, 1001 // over two batches; the first try marked the first 1,001
	err = exec(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < `+strconv.Itoa(copies)+`)
		INSERT INTO listing_changes (listing_id, firm_id, no, revision, visible_before, visible_after, deleted, changed_at)
		SELECT c.listing_id, c.firm_id, c.no, c.revision, c.visible_before, c.visible_after, c.deleted, c.changed_at
		FROM n CROSS JOIN listing_changes c WHERE c.seq = $1`, cs[0].Seq)
	if err != nil {
		t.Fatal(err)
	}
	all, err := fs.Pending(ctx, 0, 2*copies)
	if err != nil || len(all) != copies+1 {
		t.Fatalf("Pending = %d changes, %v; want %d", len(all), err, copies+1)
	}
	if err := fs.MarkApplied(ctx, seqs(all), true); err != nil {
		t.Fatal(err)
	}
	err = exec(ctx, `UPDATE listing_changes SET applied_at = NULL, done_at = NULL, replayed = TRUE
		WHERE seq IN (SELECT seq FROM listing_changes ORDER BY seq LIMIT `+strconv.Itoa(cutAt)+`)`)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := fs.Adopt(ctx, "redis-2", time.Hour); err != nil || n != copies+1-cutAt {
		t.Fatalf("Adopt of another Redis after a replay cut short = %d, %v; want the %d changes still applied", n, err, copies+1-cutAt)
	}
	again, err := fs.Pending(ctx, 0, 2*copies)
	if err != nil || !slices.Equal(seqs(again), seqs(all)) {
		t.Fatalf("Pending after the replay = %d changes, %v; want all %d", len(again), err, len(all))
	}
	for _, c := range again {
		if !c.Replayed {
			t.Fatalf("change %d not marked replayed", c.Seq)
		}
	}
	if p, err := s.Position(ctx); err != nil || p.RedisIdentity != "redis-2" {
		t.Fatalf("Position = %+v, %v; want redis-2 adopted", p, err)
	}
}

// testFeedSettle: a writer marks its own changes, only while the Redis it
// published to is the adopted one.
func testFeedSettle(t *testing.T, s FeedStore, _ Exec) {
	ctx := context.Background()
	f := seed(t, s)
	a := seedActive(t, s, f)
	b := seedActive(t, s, f)
	fs := mustAcquire(t, s)
	if _, err := fs.Adopt(ctx, "redis-1", time.Hour); err != nil {
		t.Fatal(err)
	}
	p, err := s.Position(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(ctx, "redis-0", []upstream.Settled{{ID: a.ID, Revision: 1}}); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	if cs, err := s.Unapplied(ctx, p.LastSeq, 100); err != nil || len(cs) != 2 {
		t.Fatalf("Unapplied after a settle for another Redis = %+v, %v; want both", cs, err)
	}
	if err := s.Settle(ctx, "redis-1", []upstream.Settled{{ID: a.ID, Revision: 1}, {ID: b.ID, Revision: 9}}); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	cs, err := s.Unapplied(ctx, p.LastSeq, 100)
	if err != nil || len(cs) != 1 || cs[0].ListingID != b.ID {
		t.Fatalf("Unapplied after settling a = %+v, %v; want only b's (its revision 9 was not written)", cs, err)
	}
	if caught, err := s.CaughtUp(ctx, cs[0].Seq-1); err != nil || !caught {
		t.Fatalf("CaughtUp(before b) = %v, %v; want true", caught, err)
	}
	if applied, err := s.Applied(ctx, a.ID, 1); err != nil || !applied {
		t.Fatalf("Applied(a, 1) = %v, %v; want true: settled", applied, err)
	}
	if applied, err := s.Applied(ctx, b.ID, 0); err != nil || !applied {
		t.Fatalf("Applied(b, 0) = %v, %v; want true: no change of b up to revision 0", applied, err)
	}
	if applied, err := s.Applied(ctx, b.ID, 1); err != nil || applied {
		t.Fatalf("Applied(b, 1) = %v, %v; want false", applied, err)
	}
	if caught, err := s.CaughtUp(ctx, p.LastSeq); err != nil || caught {
		t.Fatalf("CaughtUp(all) = %v, %v; want false", caught, err)
	}
	if unpurged, err := fs.Unpurged(ctx, 0, 100); err != nil || len(unpurged) != 0 {
		t.Fatalf("Unpurged = %+v, %v; want none: a settled change is done", unpurged, err)
	}
}

// testStoredBodies: a write keeps the listing's response body with it; a
// read answers the kept body while it is current, byte for byte what
// encoding the listing gives; a write by another writer makes it stale, and
// the read after it encodes the row again and keeps the result, without
// recording a change.
func testStoredBodies(t *testing.T, s FeedStore, exec Exec) {
	ctx := context.Background()
	f := seed(t, s)
	a := seedActive(t, s, f)
	// kept reports whether a read answers what the row keeps: it marks the
	// kept tag and reads.
	kept := func() bool {
		t.Helper()
		if err := exec(ctx, `UPDATE listings SET etag = '"marked"' WHERE id = $1`, a.ID); err != nil {
			t.Fatal(err)
		}
		got, err := s.EncodedByID(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if string(got.ETag) == `"marked"` {
			if err := exec(ctx, `UPDATE listings SET etag = $1 WHERE id = $2`, string(upstream.ETag(got.Body)), a.ID); err != nil {
				t.Fatal(err)
			}
			return true
		}
		return false
	}
	requireEncoded := func(what string) upstream.Encoded {
		t.Helper()
		l, err := s.ListingByID(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		want, err := upstream.Encode(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, read := range []func() (upstream.Encoded, error){
			func() (upstream.Encoded, error) { return s.EncodedByID(ctx, a.ID) },
			func() (upstream.Encoded, error) { return s.EncodedByNumber(ctx, a.FirmID, a.No) },
		} {
			got, err := read()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if got.Modified == 0 {
				t.Fatalf("%s: read no Last-Modified", what)
			}
			want.Modified = got.Modified // the read that made the body gave it its time
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: read\n%+v\nwant the listing encoded\n%+v", what, got, want)
			}
		}
		return want
	}
	last := func() int64 {
		t.Helper()
		p, err := s.Position(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return p.LastSeq
	}

	if !kept() {
		t.Fatal("the import kept no body")
	}
	requireEncoded("after the import")

	before := last()
	if err := exec(ctx, `UPDATE listings SET is_active = $1 WHERE id = $2`, false, a.ID); err != nil {
		t.Fatal(err)
	}
	if last() == before {
		t.Fatal("another writer's UPDATE was not recorded")
	}
	// The feed's consumer reads the changed row: it encodes it and keeps
	// the body.
	fs := mustAcquire(t, s)
	states, err := fs.Listings(ctx, []int64{a.ID})
	if err != nil {
		t.Fatal(err)
	}
	if !kept() {
		t.Fatal("the consumer's read kept no body")
	}
	if e := requireEncoded("after another writer's UPDATE"); !reflect.DeepEqual(states[a.ID].Encoded, e) || e.Active {
		t.Fatalf("the consumer read %+v; want %+v, not active", states[a.ID].Encoded, e)
	}

	// A miss does the same.
	if err := exec(ctx, `UPDATE listings SET is_active = $1 WHERE id = $2`, true, a.ID); err != nil {
		t.Fatal(err)
	}
	if e := requireEncoded("after another writer's second UPDATE"); !e.Active {
		t.Fatal("encoded passive after is_active = true")
	}
	recorded := last()
	if !kept() {
		t.Fatal("the read after another writer's UPDATE kept no body")
	}
	requireEncoded("read again")
	if got := last(); got != recorded {
		t.Fatalf("keeping bodies recorded changes up to %d (was %d); want none", got, recorded)
	}

	next := a
	next.Title = "Replaced"
	if _, err := s.UpdateListing(ctx, next, upstream.Precondition{}); err != nil {
		t.Fatal(err)
	}
	if !kept() {
		t.Fatal("UpdateListing kept no body")
	}
	if e := requireEncoded("after UpdateListing"); !strings.Contains(string(e.Body), `"title":"Replaced"`) {
		t.Fatalf("body after UpdateListing: %s", e.Body)
	}
}

// testImportedBodiesNotStale: an import keeps each listing's body from the
// start (its document), so the consumer's backfill, which decodes and
// encodes every stale one, finds none of them stale; a row whose kept
// body is gone is, until KeepBodies keeps one.
func testImportedBodiesNotStale(t *testing.T, s FeedStore, exec Exec) {
	ctx := context.Background()
	f := seed(t, s)
	a := seedActive(t, s, f)
	fs := mustAcquire(t, s)
	ids, err := fs.StaleBodies(ctx, a.ID-1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(ids, a.ID) {
		t.Fatalf("StaleBodies = %v; an imported listing's body is kept", ids)
	}
	if err := exec(ctx, `UPDATE listings SET body_revision = NULL, document_body_revision = NULL WHERE id = $1`, a.ID); err != nil {
		t.Fatal(err)
	}
	if ids, err = fs.StaleBodies(ctx, a.ID-1, 10); err != nil || !slices.Contains(ids, a.ID) {
		t.Fatalf("StaleBodies = %v, %v; want the listing whose kept body is gone", ids, err)
	}
	if err := fs.KeepBodies(ctx, []int64{a.ID}); err != nil {
		t.Fatal(err)
	}
	if ids, err = fs.StaleBodies(ctx, a.ID-1, 10); err != nil || slices.Contains(ids, a.ID) {
		t.Fatalf("StaleBodies = %v, %v after KeepBodies; want its body kept", ids, err)
	}
	if err := exec(ctx, `UPDATE listings SET body_revision = NULL, document_body_revision = NULL WHERE id = $1`, a.ID); err != nil {
		t.Fatal(err)
	}
	// A current document without its tag is no kept body either.
	if err := exec(ctx, `UPDATE listings SET document_body_revision = revision, etag = NULL WHERE id = $1`, a.ID); err != nil {
		t.Fatal(err)
	}
	if ids, err = fs.StaleBodies(ctx, a.ID-1, 10); err != nil || !slices.Contains(ids, a.ID) {
		t.Fatalf("StaleBodies = %v, %v; want the listing whose tag is gone", ids, err)
	}
}
