package upstream

import (
	"context"
	"errors"
	"time"
)

// The change feed: a trigger in each engine records every write of a
// listing that changes a column it watches (an UPDATE of the kept body,
// tag or date alone is not one), whoever makes it, as a Change in the
// writer's own transaction. One gateway at a time (the consumer, holding a
// FeedSession) applies them to every cache tier and marks them applied,
// then done once the CDN was purged too. Changes are read by "not yet
// applied", never through a cursor: sequence numbers are given out before
// commit, so a lower one can commit later.

// ErrNotConsumer is what Acquire returns while another gateway holds the
// feed, and what a session's calls return once it lost it.
var ErrNotConsumer = errors.New("another gateway consumes the change feed")

// Change is one recorded write of a listing. Revision is the listing's
// revision after the write (the trigger raises it for writers that do
// not). OldFirmID and OldNo are set when the write moved the listing to
// another firm or number. Visible means active and not deleted; Deleted is
// set for a tombstone and for a row that was removed.
type Change struct {
	Seq              int64
	ListingID        int64
	FirmID, No       int64
	OldFirmID, OldNo int64
	Revision         int64
	VisibleBefore    bool
	VisibleAfter     bool
	Deleted          bool
	ChangedAt        time.Time
	Applied          bool
	// Replayed changes are applied again to a Redis that may have lost
	// them; the CDN needs no second purge.
	Replayed bool
}

// Moved reports whether the change took the listing from another number.
func (c Change) Moved() bool { return c.OldFirmID != 0 || c.OldNo != 0 }

// ListingState is what the store holds for a listing id now: a live
// listing, a tombstone (Deleted; Listing then has only its id, firm, number
// and revision), or nothing (Gone: the row was removed).
type ListingState struct {
	Listing Listing
	// Encoded is the live listing's response, kept by the store.
	Encoded Encoded
	Deleted bool
	Gone    bool
}

// FeedPosition is where the feed stands: the Redis that its applied marks
// refer to (empty before any consumer adopted one) and the highest
// sequence number still kept (0 when Prune left none).
type FeedPosition struct {
	RedisIdentity string
	LastSeq       int64
}

// Settled names a listing version whose caches and CDN copies the writing
// gateway brought up to date itself.
type Settled struct {
	ID, Revision int64
}

// Feed is a store's change feed, as every gateway uses it. Implementations
// are safe for concurrent use.
type Feed interface {
	// Acquire makes the caller the consumer, or returns ErrNotConsumer
	// while another holds the feed. holder names the caller for operators,
	// and is recorded in the store. SQLite off unix cannot hold the feed.
	Acquire(ctx context.Context, holder string) (FeedSession, error)
	// Position reads where the feed stands.
	Position(ctx context.Context) (FeedPosition, error)
	// Unapplied returns up to limit changes up to seq upTo, by sequence,
	// that no consumer has applied yet: the listings whose cached copies
	// may be old.
	Unapplied(ctx context.Context, upTo int64, limit int) ([]Change, error)
	// CaughtUp reports whether every change up to upTo was applied.
	CaughtUp(ctx context.Context, upTo int64) (bool, error)
	// Applied reports whether every change of the listing up to revision
	// was applied: no cache tier holds an older version any more.
	Applied(ctx context.Context, listingID, revision int64) (bool, error)
	// Settle marks the changes that wrote these versions, and are not yet
	// applied, applied and done, in one statement, provided the consumer's
	// Redis is still redisIdentity (the writer published to that Redis
	// itself); otherwise it changes nothing.
	Settle(ctx context.Context, redisIdentity string, versions []Settled) error
}

// FeedSession is the consumer's hold on the feed, for one goroutine at a
// time. Its calls return ErrNotConsumer, or another error, once the hold
// is lost; the consumer then stops applying and closes it.
type FeedSession interface {
	// Renew proves the hold still stands; it must be called more often
	// than Lease. A Renew that succeeds past Lease proves it too: the hold
	// stood throughout (a session's lock, an open file's), since a session
	// that lost it never gets it back (its calls keep failing).
	Renew(ctx context.Context) error
	// Lease is how long after a successful call the hold is sure to
	// stand: past it another gateway may have taken the feed.
	Lease() time.Duration
	// Pending returns up to limit changes not yet applied that were made
	// at least settle ago, by sequence.
	Pending(ctx context.Context, settle time.Duration, limit int) ([]Change, error)
	// Unpurged returns up to limit changes applied at least after ago
	// but not yet done, by sequence.
	Unpurged(ctx context.Context, after time.Duration, limit int) ([]Change, error)
	// Listings reads the current state of these listing ids. A live one
	// whose kept response body is not current gets one, written to its row
	// (one statement each, no transaction: a failed write fails the call),
	// whose date it answers (Encoded.Modified, 0 where the row changed
	// meanwhile). A row whose document does not decode is Gone.
	Listings(ctx context.Context, ids []int64) (map[int64]ListingState, error)
	// KeepBodies keeps the response body of each live listing of ids
	// whose kept body is not current: the backfill's write.
	KeepBodies(ctx context.Context, ids []int64) error
	// StaleBodies returns up to limit ids above after, in order, of live
	// listings whose kept response body is missing or older than the row.
	StaleBodies(ctx context.Context, after int64, limit int) ([]int64, error)
	// MarkApplied marks changes applied, and done as well when done is set.
	MarkApplied(ctx context.Context, seqs []int64, done bool) error
	// MarkDone marks changes done.
	MarkDone(ctx context.Context, seqs []int64) error
	// Adopt records redisIdentity as the Redis that applied marks refer
	// to. When it differs from the one recorded, every change made within
	// replay that was applied is marked not applied, not done and
	// replayed, so that it is applied to the new Redis, and it returns how
	// many marks it made (a change a writer settled meanwhile counts
	// twice). The marks go in short transactions,
	// the old Redis still adopted meanwhile; the last one adopts the new
	// Redis and marks again what a writer settled behind them, so that a
	// replay cut short goes on where it stopped at the next call.
	Adopt(ctx context.Context, redisIdentity string, replay time.Duration) (int64, error)
	// AwaitUndone reports whether any change is not done yet (not
	// applied, or its purge not acknowledged), waiting up to wait for one:
	// it returns true soon after any writer commits a change, and false
	// once wait has passed without one (at once, with wait 0), or sooner
	// where the engine bounds a wait (PostgreSQL: by its statement
	// timeout), so callers loop. It is the idle consumer's wait: it costs
	// next to nothing while the feed is idle where the engine can be told
	// of commits (PostgreSQL with TEMP, SQLite with inotify; otherwise it
	// asks every 100 ms), and proves the hold as Renew does.
	AwaitUndone(ctx context.Context, wait time.Duration) (bool, error)
	// Backlog counts the changes not yet applied and how long ago the
	// oldest was made, by the database's clock.
	Backlog(ctx context.Context) (rows int64, lag time.Duration, err error)
	// Prune deletes up to limit done changes made more than keep ago, and
	// the graves of removed rows older than keep; it returns how many
	// changes it deleted.
	Prune(ctx context.Context, keep time.Duration, limit int) (int64, error)
	// Close gives the feed up.
	Close(ctx context.Context) error
}
