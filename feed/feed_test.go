package feed

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/coding"
	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/upstream"
	"github.com/realty-gateway/gateway/upstream/sqlite"
	"github.com/realty-gateway/gateway/upstream/storetest"
)

// purges is a CDN stand-in: it records purges and holds their outcome
// until released.
type purges struct {
	mu      sync.Mutex
	got     []string
	pending []func(bool)
	hold    bool
}

func (p *purges) PurgeBackground(_ context.Context, hard bool, done func(bool), keys ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	kind := "soft"
	if hard {
		kind = "hard"
	}
	p.got = append(p.got, kind+" "+strings.Join(keys, " "))
	if p.hold {
		p.pending = append(p.pending, done)
		return
	}
	done(true)
}

func (p *purges) release() {
	p.mu.Lock()
	pending := p.pending
	p.pending, p.hold = nil, false
	p.mu.Unlock()
	for _, done := range pending {
		done(true)
	}
}

func (p *purges) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.got)
}

// fixture is a SQLite store with one active listing, a raw connection to
// its file, and the in-process cache over it.
type fixture struct {
	store   *sqlite.Store
	raw     *sql.DB
	listing upstream.Listing
	cache   *cache.Cache
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	raw, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	l := storetest.ImportOne(t, s, upstream.Listing{Title: "v1", IsActive: true})
	c, err := cache.NewLocal(cache.DefaultConfig(), cache.Deps{Source: s, Log: slog.New(slog.DiscardHandler), LoadTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return fixture{store: s, raw: raw, listing: l, cache: c}
}

func (f fixture) consumer(t *testing.T, cfg Config, p Purger) *Consumer {
	t.Helper()
	deps := Deps{Store: f.store, Target: f.cache, Keys: func(id int64) []string { return []string{"realty-" + itoa(id)} },
		Holder: t.Name(), CacheLifetime: time.Hour, Log: slog.New(slog.DiscardHandler)}
	if p != nil {
		deps.Purger = p
	}
	c, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.Run(ctx) })
	t.Cleanup(func() { stop(); wg.Wait() })
	return c
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func (f fixture) title(t *testing.T) string {
	t.Helper()
	e, err := f.cache.Get(context.Background(), cache.ByID(f.listing.ID), coding.Identity, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return string(e.Body)
}

func (f fixture) count(t *testing.T, where string) int {
	t.Helper()
	var n int
	if err := f.raw.QueryRow(`SELECT count(*) FROM listing_changes WHERE ` + where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func fastConfig() Config {
	cfg := DefaultConfig()
	cfg.Poll, cfg.Settle = 10*time.Millisecond, 0
	return cfg
}

// TestConsumerAppliesAndPurges: a change made on the file reaches the
// cache and the CDN, and is done only once the CDN acknowledged.
func TestConsumerAppliesAndPurges(t *testing.T) {
	f := newFixture(t)
	if !strings.Contains(f.title(t), `"title":"v1"`) {
		t.Fatal("not cached")
	}
	p := &purges{}
	f.consumer(t, fastConfig(), p)
	testenv.WaitFor(t, func() bool { return f.count(t, "done_at IS NULL") == 0 }) // the import
	p.mu.Lock()
	p.hold = true
	p.mu.Unlock()
	if _, err := f.raw.Exec(`UPDATE listings SET document = replace(document, '"title":"v1"', '"title":"v2"') WHERE id = ?`, f.listing.ID); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, func() bool { return strings.Contains(f.title(t), `"title":"v2"`) })
	testenv.WaitFor(t, func() bool { return f.count(t, "applied_at IS NOT NULL AND done_at IS NULL") == 1 })
	p.release()
	testenv.WaitFor(t, func() bool { return f.count(t, "done_at IS NULL") == 0 })
	want := "soft realty-" + itoa(f.listing.ID)
	if got := p.seen(); !slices.Contains(got, want) {
		t.Fatalf("purges %q; want %q", got, want)
	}
	if _, err := f.raw.Exec(`UPDATE listings SET is_active = 0 WHERE id = ?`, f.listing.ID); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, func() bool { return slices.Contains(p.seen(), "hard realty-"+itoa(f.listing.ID)) })
}

// TestConsumerTakeoverRepurges: a change another consumer applied but did
// not see purged is purged again by the next one.
func TestConsumerTakeoverRepurges(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	sess, err := f.store.Acquire(ctx, "the consumer that dies")
	if err != nil {
		t.Fatal(err)
	}
	cs, err := sess.Pending(ctx, 0, 10)
	if err != nil || len(cs) != 1 {
		t.Fatalf("pending %v, %v", cs, err)
	}
	if err := sess.MarkApplied(ctx, []int64{cs[0].Seq}, false); err != nil {
		t.Fatal(err)
	}
	if err := sess.Close(ctx); err != nil { // it dies; its lease is given up
		t.Fatal(err)
	}
	p := &purges{}
	f.consumer(t, fastConfig(), p)
	testenv.WaitFor(t, func() bool { return f.count(t, "done_at IS NULL") == 0 })
	if got := p.seen(); len(got) != 1 {
		t.Fatalf("purges %q; want the one left behind", got)
	}
}

// TestConsumerOff: with the feed off the records are marked done without
// being applied, and pruned.
func TestConsumerOff(t *testing.T) {
	f := newFixture(t)
	f.title(t) // cached
	if _, err := f.raw.Exec(`UPDATE listings SET document = replace(document, '"title":"v1"', '"title":"v2"') WHERE id = ?`, f.listing.ID); err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig()
	cfg.Enabled = false
	f.consumer(t, cfg, nil)
	testenv.WaitFor(t, func() bool { return f.count(t, "done_at IS NULL") == 0 })
	if !strings.Contains(f.title(t), `"title":"v1"`) {
		t.Fatal("the feed is off, yet the cached copy changed")
	}
}

func TestMerge(t *testing.T) {
	changes := []upstream.Change{
		{Seq: 1, ListingID: 7, FirmID: 1, No: 3, Revision: 2, VisibleBefore: true, VisibleAfter: true, Replayed: true},
		{Seq: 2, ListingID: 8, FirmID: 1, No: 4, Revision: 5, VisibleAfter: true},
		{Seq: 3, ListingID: 7, FirmID: 2, No: 9, OldFirmID: 1, OldNo: 3, Revision: 3, VisibleBefore: true, VisibleAfter: true, Replayed: true},
		{Seq: 4, ListingID: 7, FirmID: 2, No: 9, Revision: 4, VisibleBefore: true, VisibleAfter: true, Replayed: true},
	}
	ls := merge(changes)
	if len(ls) != 2 || ls[0].id != 7 || ls[1].id != 8 {
		t.Fatalf("merged %+v; want listing 7, then 8", ls)
	}
	a, b := ls[0], ls[1]
	if !slices.Equal(a.seqs, []int64{1, 3, 4}) || a.revision != 4 || a.hard || !a.replayed ||
		!slices.Equal(a.numbers, []cache.Key{cache.ByNumber(1, 3), cache.ByNumber(2, 9)}) {
		t.Fatalf("listing 7 merged as %+v", *a)
	}
	if !b.hard || b.replayed || b.revision != 5 {
		t.Fatalf("listing 8 merged as %+v; want a hard purge (it became visible), not replayed", *b)
	}
}

// TestConsumerKeepsBodies: listings without a current response body
// (written before bodies were kept) get one from the consumer, batch by
// batch, without any change recorded; deleted ones get none.
func TestConsumerKeepsBodies(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	more := make([]upstream.Listing, 2*backfillBatch+10)
	for i := range more {
		more[i] = upstream.Listing{Title: "older", FirmID: f.listing.FirmID, FirmUserID: f.listing.FirmUserID, IsActive: true}
	}
	if _, err := f.store.ImportListings(ctx, more); err != nil {
		t.Fatal(err)
	}
	if _, err := f.raw.Exec(`UPDATE listings SET body = NULL, etag = NULL, body_revision = NULL`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.raw.Exec(`UPDATE listings SET deleted = 1 WHERE id = ?`, f.listing.ID); err != nil {
		t.Fatal(err)
	}
	stale := func() int {
		var n int
		if err := f.raw.QueryRow(`SELECT count(*) FROM listings WHERE NOT deleted AND (body_revision IS NULL OR body_revision <> revision)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Nothing for the consumer to apply: the bodies are all it has to do.
	if _, err := f.raw.Exec(`UPDATE listing_changes SET applied_at = 1, done_at = 1`); err != nil {
		t.Fatal(err)
	}
	if n := stale(); n != len(more) {
		t.Fatalf("%d listings without a body; want %d", n, len(more))
	}
	f.consumer(t, fastConfig(), nil)
	testenv.WaitFor(t, func() bool { return stale() == 0 })
	if n := f.count(t, "1 = 1"); n != 1+len(more)+1 { // the imports and the delete
		t.Fatalf("%d changes recorded; want %d: keeping bodies records none", n, 2+len(more))
	}
	var body []byte
	if err := f.raw.QueryRow(`SELECT body FROM listings WHERE deleted`).Scan(&body); err != nil || body != nil {
		t.Fatalf("deleted listing's body %q, %v; want none", body, err)
	}
}

// TestConsumerImportSendsNoPurges: an import of new listings reaches the
// caches (a cached absence of one of them is replaced) and sends the CDN
// nothing, since no edge has seen a version of them; their first update
// is purged as any is.
func TestConsumerImportSendsNoPurges(t *testing.T) {
	const n = 1200 // more than a batch of the consumer
	f := newFixture(t)
	ctx := context.Background()
	p := &purges{}
	cfg := fastConfig()
	cfg.Batch = 500
	c := f.consumer(t, cfg, p)
	waitLong(t, func() bool { return f.count(t, "done_at IS NULL") == 0 }) // the fixture's own
	before := len(p.seen())
	next := f.listing.ID + 1
	if _, err := f.cache.Get(ctx, cache.ByID(next), coding.Identity, time.Now()); !errors.Is(err, upstream.ErrNotFound) { // a cached absence
		t.Fatalf("Get(%d) before the import: %v; want ErrNotFound", next, err)
	}
	ls := make([]upstream.Listing, n)
	for i := range ls {
		ls[i] = upstream.Listing{Title: "imported", FirmID: f.listing.FirmID, FirmUserID: f.listing.FirmUserID, IsActive: true}
	}
	stored, err := f.store.ImportListings(ctx, ls)
	if err != nil {
		t.Fatal(err)
	}
	waitLong(t, func() bool { return f.count(t, "done_at IS NULL") == 0 })
	if _, err := f.cache.Get(ctx, cache.ByID(next), coding.Identity, time.Now()); err != nil {
		t.Fatalf("Get(%d) after the feed applied the import: %v", next, err)
	}
	if got := p.seen()[before:]; len(got) != 0 {
		t.Fatalf("the import sent %d purges (%q...); want none", len(got), got[0])
	}
	if got := c.Stats().Unpurged; got < n {
		t.Fatalf("Stats().Unpurged = %d; want at least %d", got, n)
	}
	if _, err := f.raw.Exec(`UPDATE listings SET document = replace(document, 'imported', 'edited') WHERE id = ?`, stored[0].ID); err != nil {
		t.Fatal(err)
	}
	want := "soft realty-" + itoa(stored[0].ID)
	waitLong(t, func() bool { return slices.Contains(p.seen(), want) })
}

func TestFirstVersion(t *testing.T) {
	tests := []struct {
		name string
		give upstream.Change
		want bool
	}{
		{"insert", upstream.Change{Revision: 1, VisibleAfter: true}, true},
		{"passive insert", upstream.Change{Revision: 1}, true},
		{"update", upstream.Change{Revision: 2, VisibleBefore: true, VisibleAfter: true}, false},
		{"made visible", upstream.Change{Revision: 2, VisibleAfter: true}, false},
		{"insert over a removed id", upstream.Change{Revision: 4, VisibleAfter: true}, false},
		{"deleted", upstream.Change{Revision: 1, Deleted: true}, false},
		{"moved", upstream.Change{Revision: 1, OldFirmID: 1, OldNo: 2, VisibleAfter: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := firstVersion(tt.give); got != tt.want {
				t.Fatalf("firstVersion(%+v) = %v; want %v", tt.give, got, tt.want)
			}
		})
	}
}

// waitLong waits for cond a minute at most: applying a thousand records
// under the race detector on a busy machine takes seconds.
func waitLong(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in a minute")
		}
	}
}
