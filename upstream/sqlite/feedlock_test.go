package sqlite_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/upstream"
	"github.com/realty-gateway/gateway/upstream/sqlite"
	"github.com/realty-gateway/gateway/upstream/storetest"
)

// holderEnv, set, makes the test binary a process that holds the feed of
// the file it names and waits to be killed.
const holderEnv = "GATEWAY_TEST_SQLITE_FEED_HOLDER"

func TestMain(m *testing.M) {
	if path := os.Getenv(holderEnv); path != "" {
		os.Exit(holdFeed(path))
	}
	os.Exit(m.Run())
}

func holdFeed(path string) int {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if _, err := s.Acquire(ctx, "killed-holder"); err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("held")
	time.Sleep(time.Hour)
	return 0
}

// TestFeedFailsOverWhenTheHolderDies: a process that holds the feed and
// is killed (SIGKILL: no release runs) leaves it to the next, at once;
// while it lives, nobody else gets it, and a clean release is taken over
// just as well. The feed's lock lives in the operating system, not in
// the file, so it is neither renewed by writes nor left behind.
func TestFeedFailsOverWhenTheHolderDies(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")
	s, err := sqlite.Open(ctx, path)
	s = storetest.Opened(t, s, err)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), holderEnv+"="+path)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Fatalf("holder process: %q, %v", line, err)
	}
	if _, err := s.Acquire(ctx, "second"); !errors.Is(err, upstream.ErrNotConsumer) {
		t.Fatalf("Acquire while another process holds the feed: %v; want ErrNotConsumer", err)
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	sess, err := s.Acquire(ctx, "second")
	if err != nil {
		t.Fatalf("Acquire after the holder died: %v", err)
	}
	if err := sess.Renew(ctx); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if _, err := s.Acquire(ctx, "third"); !errors.Is(err, upstream.ErrNotConsumer) {
		t.Fatalf("Acquire while this process holds the feed: %v; want ErrNotConsumer", err)
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	third, err := s.Acquire(ctx, "third")
	if err != nil {
		t.Fatalf("Acquire after a release: %v", err)
	}
	if err := third.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestFeedLeavesAnEarlierReleasesLease: a release before the lock held
// the feed through a lease in feed_state; while such a lease runs, the
// feed is not taken, and a holder of the lock keeps such a release out.
func TestFeedLeavesAnEarlierReleasesLease(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")
	s, err := sqlite.Open(ctx, path)
	s = storetest.Opened(t, s, err)
	db := openRaw(t, path)
	const earlierTake = `UPDATE feed_state SET holder = ?, lease_until = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) + 6000
		WHERE id = 1 AND (holder = ? OR lease_until < CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))`
	res, err := db.ExecContext(ctx, earlierTake, "earlier", "earlier")
	if n, _ := res.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("the earlier release's take: %v, %d rows", err, n)
	}
	if _, err := s.Acquire(ctx, "now"); !errors.Is(err, upstream.ErrNotConsumer) {
		t.Fatalf("Acquire while an earlier release's lease runs: %v; want ErrNotConsumer", err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE feed_state SET lease_until = 0 WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	sess, err := s.Acquire(ctx, "now")
	if err != nil {
		t.Fatalf("Acquire once the lease ran out: %v", err)
	}
	defer sess.Close(ctx)
	res, err = db.ExecContext(ctx, earlierTake, "earlier", "earlier")
	if n, _ := res.RowsAffected(); err != nil || n != 0 {
		t.Fatalf("an earlier release took the feed from the lock's holder: %v, %d rows", err, n)
	}
}
