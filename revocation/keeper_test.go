package revocation

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/upstream"
	"github.com/realty-gateway/gateway/upstream/sqlite"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// keeperWorld is a SQLite store with firm 1 (users 1 and 2) and firm 2,
// and a Keeper on it; with Redis, under a key prefix of the test's own.
type keeperWorld struct {
	store  *sqlite.Store
	set    *Set
	keeper *Keeper
	rdb    redis.UniversalClient
	prefix string
}

func newKeeperWorld(t *testing.T, withRedis bool, poll time.Duration) keeperWorld {
	t.Helper()
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "gw.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	for _, name := range []string{"one", "two"} {
		if _, err := store.AddFirm(ctx, name, []byte(name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, email := range []string{"a@one.example", "b@one.example"} {
		if _, err := store.AddUser(ctx, upstream.User{FirmID: 1, Email: email}); err != nil {
			t.Fatal(err)
		}
	}
	w := keeperWorld{store: store, set: NewSet(), prefix: testenv.RandomName("rev") + ":"}
	if withRedis {
		w.rdb = redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
		t.Cleanup(func() { w.rdb.Close() })
	}
	if w.keeper, err = NewKeeper(Config{Poll: poll}, Deps{Set: w.set, Source: store, Redis: w.rdb, Prefix: w.prefix,
		Horizon: time.Hour, StoreTimeout: time.Second, RedisTimeout: time.Second, Log: quiet()}); err != nil {
		t.Fatal(err)
	}
	return w
}

// run starts the Keeper until the test ends.
func (w keeperWorld) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.keeper.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestKeeperLoadPrunesAndLoads(t *testing.T) {
	ctx := context.Background()
	w := newKeeperWorld(t, false, time.Hour)
	now := time.Now()
	if _, err := w.store.RevokeTokens(ctx, 2, "", now.Add(-2*time.Hour)); err != nil { // expired: pruned
		t.Fatal(err)
	}
	if _, err := w.store.RevokeTokens(ctx, 1, "a@one.example", now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := w.keeper.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if !w.set.Revoked(1, 1, now.Add(-2*time.Minute).UnixMilli()) || w.set.Revoked(1, 2, 0) {
		t.Fatal("the revocation in force was not loaded for its user alone")
	}
	if w.set.Revoked(2, 9, now.Add(-3*time.Hour).UnixMilli()) || w.set.Len() != 1 {
		t.Fatalf("the expired revocation was loaded (Len %d)", w.set.Len())
	}
	left, err := w.store.Revocations(ctx, time.Time{})
	if err != nil || len(left) != 1 || left[0].FirmID != 1 {
		t.Fatalf("store after Load: %+v, %v; want the expired revocation pruned", left, err)
	}
}

// TestKeeperPollsTheStore: without Redis, a revocation written to the
// store is applied within the poll interval.
func TestKeeperPollsTheStore(t *testing.T) {
	ctx := context.Background()
	w := newKeeperWorld(t, false, 50*time.Millisecond)
	if err := w.keeper.Load(ctx); err != nil {
		t.Fatal(err)
	}
	w.run(t)
	r, err := w.store.RevokeTokens(ctx, 1, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	testenv.WaitFor(t, func() bool { return w.set.Revoked(1, 2, r.At.UnixMilli()) })
	t.Logf("applied from the store after %v (poll 50ms)", time.Since(began).Round(time.Millisecond))
}

// TestKeeperAppliesAnnouncements: with Redis, an announced revocation is
// applied at once, long before the (hour-long) poll.
func TestKeeperAppliesAnnouncements(t *testing.T) {
	ctx := context.Background()
	w := newKeeperWorld(t, true, time.Hour)
	if err := w.keeper.Load(ctx); err != nil {
		t.Fatal(err)
	}
	w.run(t)
	testenv.WaitFor(t, func() bool { return w.keeper.Stats().Subscribed })
	r := upstream.Revocation{FirmID: 1, UserID: 2, At: time.UnixMilli(time.Now().UnixMilli())}
	n, err := Announce(ctx, w.rdb, w.prefix, r)
	if err != nil || n != 1 {
		t.Fatalf("Announce() = %d, %v; want 1 receiver", n, err)
	}
	testenv.WaitFor(t, func() bool { return w.set.Revoked(1, 2, r.At.UnixMilli()) })
	if w.set.Revoked(1, 1, r.At.UnixMilli()) {
		t.Fatal("an announcement for user 2 revoked user 1")
	}
	// An unreadable announcement is dropped; the store is read instead.
	if err := w.rdb.Publish(ctx, Channel(w.prefix), "v1 junk").Err(); err != nil {
		t.Fatal(err)
	}
	stored, err := w.store.RevokeTokens(ctx, 2, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.rdb.Publish(ctx, Channel(w.prefix), "v2 whatever").Err(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, func() bool { return w.set.Revoked(2, 1, stored.At.UnixMilli()) })
	if got := w.keeper.Stats().Announced; got != 1 {
		t.Fatalf("Stats().Announced = %d; want 1", got)
	}
}

// TestKeeperReadsTheStoreOnSubscribing: what was revoked while the
// subscription was down is read from the store as soon as it is back,
// not only at the next poll.
func TestKeeperReadsTheStoreOnSubscribing(t *testing.T) {
	ctx := context.Background()
	w := newKeeperWorld(t, true, time.Hour)
	if err := w.keeper.Load(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := w.store.RevokeTokens(ctx, 1, "b@one.example", time.Now()) // after Load, never announced
	if err != nil {
		t.Fatal(err)
	}
	w.run(t)
	testenv.WaitFor(t, func() bool { return w.set.Revoked(1, 2, r.At.UnixMilli()) })
}

func TestAnnouncementEncoding(t *testing.T) {
	r := upstream.Revocation{FirmID: 12, UserID: 34, At: time.UnixMilli(1_800_000_000_123)}
	got, err := decode(encode(r))
	if err != nil || got.FirmID != r.FirmID || got.UserID != r.UserID || !got.At.Equal(r.At) {
		t.Fatalf("decode(encode(%+v)) = %+v, %v", r, got, err)
	}
	for _, bad := range []string{"", "v1", "v1 1 2", "v2 1 2 3", "v1 x 2 3", "v1 0 2 3", "v1 1 -1 3", "v1 1 2 3 4", "v1 1 2 1e3"} {
		if got, err := decode(bad); err == nil {
			t.Errorf("decode(%q) = %+v; want an error", bad, got)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	if err := (Config{}).Validate(); err == nil {
		t.Fatal("a zero poll was accepted")
	}
}

// noSource answers nothing; NewKeeper needs a Source, not its answers.
type noSource struct{}

func (noSource) Revocations(context.Context, time.Time) ([]upstream.Revocation, error) {
	return nil, nil
}
func (noSource) PruneRevocations(context.Context, time.Time) (int64, error) { return 0, nil }

// TestNewKeeperRefusesBadSettings: NewKeeper names what it refuses.
func TestNewKeeperRefusesBadSettings(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	good := func() (Config, Deps) {
		return Config{Poll: time.Second}, Deps{Set: NewSet(), Source: noSource{}, Redis: rdb,
			Horizon: time.Hour, StoreTimeout: time.Second, RedisTimeout: time.Second, Log: quiet()}
	}
	tests := []struct {
		name     string
		change   func(*Config, *Deps)
		wantText string
	}{
		{name: "poll", change: func(c *Config, _ *Deps) { c.Poll = 0 }, wantText: "revocation.poll"},
		{name: "set", change: func(_ *Config, d *Deps) { d.Set = nil }, wantText: "set"},
		{name: "source", change: func(_ *Config, d *Deps) { d.Source = nil }, wantText: "source"},
		{name: "log", change: func(_ *Config, d *Deps) { d.Log = nil }, wantText: "log"},
		{name: "horizon", change: func(_ *Config, d *Deps) { d.Horizon = 0 }, wantText: "horizon"},
		{name: "store timeout", change: func(_ *Config, d *Deps) { d.StoreTimeout = 0 }, wantText: "store timeout"},
		{name: "redis timeout", change: func(_ *Config, d *Deps) { d.RedisTimeout = 0 }, wantText: "redis timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, deps := good()
			tt.change(&cfg, &deps)
			if _, err := NewKeeper(cfg, deps); err == nil || !strings.Contains(err.Error(), tt.wantText) {
				t.Fatalf("error %v; want one naming %s", err, tt.wantText)
			}
		})
	}
	cfg, deps := good()
	deps.Redis, deps.RedisTimeout = nil, 0 // without Redis, no Redis timeout
	if _, err := NewKeeper(cfg, deps); err != nil {
		t.Fatalf("NewKeeper with good settings: %v", err)
	}
}
