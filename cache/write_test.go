package cache

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/coding"
	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/upstream"
)

func titleOf(t *testing.T, body []byte) string {
	t.Helper()
	var l upstream.Listing
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return l.Title
}

// TestSlowFillDoesNotOverwriteAnUpdate forces the interleaving: a fill
// reads version 1 and is held; an update publishes version 2; the fill
// then tries to write version 1. Both keys must keep version 2.
func TestSlowFillDoesNotOverwriteAnUpdate(t *testing.T) {
	for _, tt := range cacheKinds(t) {
		t.Run(tt.name, func(t *testing.T) {
			old := listing(9, 3, 5, true)
			old.Title = "old"
			src := newSource(old)
			c := tt.give(src)
			ctx := context.Background()

			gate := make(chan struct{})
			src.gate = gate
			fill := make(chan Entry, 1)
			go func() {
				e, _ := c.Get(ctx, ByID(9), coding.Identity, time.Now())
				fill <- e
			}()
			testenv.WaitFor(t, func() bool { return src.looked.Load() == 1 }) // the fill has read "old"

			src.mu.Lock()
			src.gate = nil // the update's own reads must not wait
			src.mu.Unlock()
			updated := old
			updated.Title = "new"
			if _, err := c.Replace(ctx, old, updated, upstream.Precondition{}); err != nil {
				t.Fatal(err)
			}
			close(gate) // the held fill now writes "old", revision 1
			if e := <-fill; titleOf(t, e.Body) != "old" {
				t.Fatalf("the held fill returned %q; the test did not force the interleaving", titleOf(t, e.Body))
			}

			for _, k := range []Key{ByID(9), ByNumber(3, 5)} {
				e, err := c.Get(ctx, k, coding.Identity, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				if got := titleOf(t, e.Body); got != "new" {
					t.Fatalf("read %+v after the update = %q (%v): the slow fill overwrote it", k, got, e.State)
				}
			}
		})
	}
}

func TestWritesPublishBothKeys(t *testing.T) {
	for _, tt := range cacheKinds(t) {
		t.Run(tt.name, func(t *testing.T) {
			src := newSource()
			c := tt.give(src)
			ctx := context.Background()

			// A cached "absent" must not outlive the create.
			if _, err := c.Get(ctx, ByID(4), coding.Identity, time.Now()); !errors.Is(err, upstream.ErrNotFound) {
				t.Fatalf("before create: %v", err)
			}
			l := listing(4, 2, 1, true)
			l.Title = "created"
			if w, err := c.Create(ctx, l); err != nil || titleOf(t, w.Entry.Body) != "created" {
				t.Fatalf("create: %v", err)
			}
			loads := src.calls.Load()
			for _, k := range []Key{ByID(4), ByNumber(2, 1)} {
				e, err := c.Get(ctx, k, coding.Identity, time.Now())
				if err != nil || e.State != Hit || titleOf(t, e.Body) != "created" {
					t.Fatalf("read %+v after create: %v %v", k, e.State, err)
				}
			}
			if src.calls.Load() != loads {
				t.Fatal("reads after a create went to the store")
			}

			created := l
			l.Title = "replaced"
			if _, err := c.Replace(ctx, created, l, upstream.Precondition{}); err != nil {
				t.Fatal(err)
			}
			for _, k := range []Key{ByID(4), ByNumber(2, 1)} {
				e, err := c.Get(ctx, k, coding.Identity, time.Now())
				if err != nil || titleOf(t, e.Body) != "replaced" {
					t.Fatalf("read %+v after replace: %v", k, err)
				}
			}

			if _, err := c.Delete(ctx, l, upstream.Precondition{}); err != nil {
				t.Fatal(err)
			}
			for _, k := range []Key{ByID(4), ByNumber(2, 1)} {
				if _, err := c.Get(ctx, k, coding.Identity, time.Now()); !errors.Is(err, upstream.ErrNotFound) {
					t.Fatalf("read %+v after delete: %v, want ErrNotFound", k, err)
				}
			}
		})
	}
}

// failingWrites wraps a shared tier and fails its writes while broken is
// set.
type failingWrites struct {
	sharedTier
	broken atomic.Bool
}

var errBroken = errors.New("tier broken")

func (f *failingWrites) errs(n int) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = errBroken
	}
	return errs
}

func (f *failingWrites) fill(ctx context.Context, names []string, r record, ttl time.Duration, l *lease) []error {
	if f.broken.Load() {
		return f.errs(len(names))
	}
	return f.sharedTier.fill(ctx, names, r, ttl, l)
}

func (f *failingWrites) write(ctx context.Context, writes []keyWrite) []error {
	if f.broken.Load() {
		return f.errs(len(writes))
	}
	return f.sharedTier.write(ctx, writes)
}

func (f *failingWrites) del(ctx context.Context, name string) error {
	if f.broken.Load() {
		return errBroken
	}
	return f.sharedTier.del(ctx, name)
}

// failingWriter returns a Redis cache whose writes can be broken, and a
// second cache on the same Redis, as another gateway.
func failingWriter(t *testing.T, src *source) (writer *Cache, tier *failingWrites, other *Cache, prefix string) {
	t.Helper()
	writer, rdb, prefix := newRedisCache(t, src)
	tier = &failingWrites{sharedTier: writer.shared}
	writer.shared = tier
	return writer, tier, must(t)(NewRedis(rdb, testRedisTimeout, testConfig(), testDeps(src, prefix))), prefix
}

// TestFailedPublishNeverServesTheOldVersion: a write whose publish fails
// leaves the old version in Redis. This process must not serve it, and
// Repair must remove it so other processes stop seeing it.
func TestFailedPublishNeverServesTheOldVersion(t *testing.T) {
	old := listing(6, 2, 2, true)
	old.Title = "old"
	src := newSource(old)
	writer, tier, other, _ := failingWriter(t, src)
	ctx := context.Background()

	if _, err := writer.Get(ctx, ByID(6), coding.Identity, time.Now()); err != nil { // both keys now hold "old"
		t.Fatal(err)
	}
	tier.broken.Store(true)
	updated := old
	updated.Title = "new"
	if _, err := writer.Replace(ctx, old, updated, upstream.Precondition{}); err != nil {
		t.Fatal(err)
	}
	if got := writer.Stats().Incoherent; got != 2 {
		t.Fatalf("incoherent = %d, want both keys counted", got)
	}
	for _, k := range []Key{ByID(6), ByNumber(2, 2)} {
		e, err := writer.Get(ctx, k, coding.Identity, time.Now())
		if err != nil || titleOf(t, e.Body) != "new" {
			t.Fatalf("writer read %+v: %v %v; an unwritten key was served", k, err, e.State)
		}
	}

	tier.broken.Store(false)
	repairCtx, cancel := context.WithCancel(ctx)
	go writer.Repair(repairCtx, 5*time.Millisecond)
	testenv.WaitFor(t, func() bool {
		_, id := writer.floors.doubted(ByID(6))
		_, no := writer.floors.doubted(ByNumber(2, 2))
		return !id && !no
	})
	cancel()
	for _, k := range []Key{ByID(6), ByNumber(2, 2)} {
		e, err := other.Get(ctx, k, coding.Identity, time.Now())
		if err != nil || titleOf(t, e.Body) != "new" {
			t.Fatalf("other process read %+v after repair: %v %q", k, err, e.Body)
		}
	}
}

// holdFill starts a read of ByID(id) that reads the store and then waits;
// closing the returned channel lets it write what it read.
func holdFill(t *testing.T, c *Cache, src *source, id int64) (release chan struct{}, done chan struct{}) {
	t.Helper()
	release, done = make(chan struct{}), make(chan struct{})
	before := src.looked.Load()
	src.mu.Lock()
	src.gate = release
	src.mu.Unlock()
	go func() {
		defer close(done)
		_, _ = c.Get(context.Background(), ByID(id), coding.Identity, time.Now())
	}()
	testenv.WaitFor(t, func() bool { return src.looked.Load() == before+1 })
	src.mu.Lock()
	src.gate = nil
	src.mu.Unlock()
	return release, done
}

// TestSlowFillAfterAFailedPublish: a write cannot publish (Redis fails),
// then Redis answers again and a fill that read the previous version
// finishes. It must neither write that version nor end the key's doubt.
func TestSlowFillAfterAFailedPublish(t *testing.T) {
	old := listing(6, 2, 2, true)
	old.Title = "old"
	src := newSource(old)
	writer, tier, other, _ := failingWriter(t, src)
	ctx := context.Background()

	release, done := holdFill(t, writer, src, 6) // has read "old"
	tier.broken.Store(true)
	updated := old
	updated.Title = "new"
	if _, err := writer.Replace(ctx, old, updated, upstream.Precondition{}); err != nil {
		t.Fatal(err)
	}
	tier.broken.Store(false)
	close(release)
	<-done

	for _, c := range []*Cache{writer, other} {
		for _, k := range []Key{ByID(6), ByNumber(2, 2)} {
			e, err := c.Get(ctx, k, coding.Identity, time.Now())
			if err != nil || titleOf(t, e.Body) != "new" {
				t.Fatalf("read %+v: %v %q; the slow fill brought the old version back", k, err, e.Body)
			}
		}
	}
}

// TestDeleteWinsOverASlowFill: a fill that read the listing before it was
// deleted must not bring it back, in either tier, even without negative
// caching.
func TestDeleteWinsOverASlowFill(t *testing.T) {
	for _, tt := range cacheKinds(t) {
		t.Run(tt.name, func(t *testing.T) {
			l := listing(8, 1, 8, true)
			src := newSource(l)
			c := tt.give(src)
			c.cfg.Negative = 0
			release, done := holdFill(t, c, src, 8)
			if _, err := c.Delete(context.Background(), l, upstream.Precondition{}); err != nil {
				t.Fatal(err)
			}
			close(release)
			<-done
			for _, k := range []Key{ByID(8), ByNumber(1, 8)} {
				if e, err := c.Get(context.Background(), k, coding.Identity, time.Now()); !errors.Is(err, upstream.ErrNotFound) {
					t.Fatalf("read %+v after delete: %v %q, want ErrNotFound", k, err, e.Body)
				}
			}
		})
	}
}

// TestWriteWithUnknownOutcomeRemovesTheKeys: the store commits but the
// answer is lost (a timeout); the cached copy must not outlive it.
func TestWriteWithUnknownOutcomeRemovesTheKeys(t *testing.T) {
	for _, tt := range cacheKinds(t) {
		t.Run(tt.name, func(t *testing.T) {
			old := listing(3, 1, 3, true)
			old.Title = "old"
			src := newSource(old)
			c := tt.give(src)
			ctx := context.Background()
			if _, err := c.Get(ctx, ByID(3), coding.Identity, time.Now()); err != nil {
				t.Fatal(err)
			}
			src.lostCommit = true
			updated := old
			updated.Title = "new"
			if _, err := c.Replace(ctx, old, updated, upstream.Precondition{}); !errors.Is(err, upstream.ErrUnavailable) {
				t.Fatalf("err = %v", err)
			}
			for _, k := range []Key{ByID(3), ByNumber(1, 3)} {
				e, err := c.Get(ctx, k, coding.Identity, time.Now())
				if err != nil || titleOf(t, e.Body) != "new" {
					t.Fatalf("read %+v after a lost commit: %v %q", k, err, e.Body)
				}
			}
		})
	}
}

// TestPurgeRemovesBothKeysEverywhere: a purge by either form removes both
// Redis keys and the other gateway's local copies, so that its next read
// of the listing goes to the store once.
func TestPurgeRemovesBothKeysEverywhere(t *testing.T) {
	tests := []struct {
		name string
		give Key
	}{
		{name: "by id", give: ByID(42)},
		{name: "by number", give: ByNumber(7, 3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := newSource(listing(42, 7, 3, true))
			rdb, prefix := redisFor(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var caches []*Cache
			for range 2 {
				c := must(t)(NewRedis(rdb, time.Second, testConfig(), testDeps(src, prefix)))
				go c.Run(ctx)
				<-c.Subscribed()
				caches = append(caches, c)
			}
			replica, admin := caches[0], caches[1]
			for _, k := range []Key{ByID(42), ByNumber(7, 3), ByID(42)} {
				if _, err := replica.Get(ctx, k, coding.Identity, time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			if n := src.calls.Load(); n != 1 {
				t.Fatalf("store calls before the purge = %d, want 1", n)
			}

			names, err := admin.Purge(ctx, tt.give)
			want := []string{prefix + "realty:id:42", prefix + "realty:listing:7-3"}
			if err != nil || !slices.Equal(names, want) {
				t.Fatalf("Purge = %q, %v; want %q", names, err, want)
			}
			if n := rdb.Exists(ctx, want...).Val(); n != 0 {
				t.Fatalf("%d keys left in Redis", n)
			}
			for _, k := range []Key{ByNumber(7, 3), ByID(42)} {
				if _, err := replica.Get(ctx, k, coding.Identity, time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			// The purge read the other key from the cached record, not the
			// store; the replica loads once for both forms.
			if n := src.calls.Load(); n != 2 {
				t.Fatalf("store calls = %d, want 2: the replica served a purged copy or loaded twice", n)
			}
		})
	}
}

func TestPurgeOfAnUnknownListingRemovesItsKey(t *testing.T) {
	src := newSource()
	c, rdb, prefix := newRedisCache(t, src)
	ctx := context.Background()
	name := prefix + "realty:listing:7-3"
	rdb.Set(ctx, name, "junk", time.Minute)
	names, err := c.Purge(ctx, ByNumber(7, 3))
	if err != nil || !slices.Equal(names, []string{name}) {
		t.Fatalf("Purge = %q, %v", names, err)
	}
	if n := rdb.Exists(ctx, name).Val(); n != 0 {
		t.Fatal("the key is still there")
	}
}

// TestPurgeOverACachedAbsence: a cached "no such listing" names no other
// key, so the listing's keys come from the store.
func TestPurgeOverACachedAbsence(t *testing.T) {
	src := newSource(listing(42, 7, 3, true))
	c, rdb, prefix := newRedisCache(t, src)
	ctx := context.Background()
	absent := record{kind: kindAbsent, etag: []byte("-"), freshUntil: time.Now().Add(time.Minute).UnixMilli()}
	rdb.Set(ctx, prefix+"realty:listing:7-3", absent.encode(), time.Minute)
	rdb.Set(ctx, prefix+"realty:id:42", absent.encode(), time.Minute)
	names, err := c.Purge(ctx, ByNumber(7, 3))
	want := []string{prefix + "realty:id:42", prefix + "realty:listing:7-3"}
	if err != nil || !slices.Equal(names, want) {
		t.Fatalf("Purge = %q, %v; want %q", names, err, want)
	}
	if n := rdb.Exists(ctx, want...).Val(); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}
