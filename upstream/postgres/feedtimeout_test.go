package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/upstream"
)

// TestFeedSessionOutlivesATimedOutStatement: a statement of the consumer's
// session that outlives its context (here it waits for a lock another
// session holds) fails, and the session, with the feed's lock, stands:
// the server cancels the statement instead of the connection being
// closed, so that the consumer may retry without giving the feed up.
func TestFeedSessionOutlivesATimedOutStatement(t *testing.T) {
	ctx := context.Background()
	url := testenv.PostgresURL(t)
	feed, sess := consumer(t, url)

	locker := connect(t, url)
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE listing_changes IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = sess.Pending(short, 0, 10)
	cancel()
	if err == nil {
		t.Fatal("Pending answered under another session's exclusive lock")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	bounded, cancel := context.WithTimeout(ctx, testenv.Patience())
	defer cancel()
	if err := sess.Renew(bounded); err != nil {
		t.Fatalf("Renew after a timed-out statement: %v; want the session, and the feed, kept", err)
	}
	if _, err := sess.Pending(bounded, 0, 10); err != nil {
		t.Fatalf("Pending after a timed-out statement: %v", err)
	}
	if other, err := feed.Acquire(bounded, "another gateway"); !errors.Is(err, upstream.ErrNotConsumer) {
		if other != nil {
			_ = other.Close(ctx)
		}
		t.Fatalf("another gateway's Acquire: %v; want ErrNotConsumer while the first holds the feed", err)
	}
}
