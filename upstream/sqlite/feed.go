package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/realty-gateway/gateway/upstream"
	"github.com/realty-gateway/gateway/upstream/internal/sqlstore"
)

// nowMillis is SQLite's clock in milliseconds since 1970 (julianday has
// millisecond precision; unixepoch('subsec') is younger than SQLite 3.40).
const nowMillis = `CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)`

// SQLite has no session locks: the feed is held through an exclusive lock
// of the operating system's on a file beside the database (lockFileSuffix),
// which needs no writes while held and which the system releases when
// the holding process dies, however it dies. The lock stands as long as
// its file is open, so feedLease only bounds each call of the consumer's.
//
// Releases before the lock kept a lease in feed_state, renewed by a write
// every poll: a holder of the lock sets that lease to lockedLease, which
// such a release never sees run out, and clears it when it gives the
// feed up; it leaves the feed to one whose lease runs.
const (
	lockFileSuffix = "-feedlock"
	feedLease      = 30 * time.Second
	lockedLease    = math.MaxInt64
)

var _ upstream.Feed = (*Store)(nil)

// Acquire takes the lock, or returns upstream.ErrNotConsumer while
// another process or session holds it.
func (s *Store) Acquire(ctx context.Context, holder string) (upstream.FeedSession, error) {
	lock, err := tryLock(s.path + lockFileSuffix)
	if err != nil {
		return nil, fmt.Errorf("feed lock: %w", err)
	}
	db := s.feedDB()
	var id int
	err = db.QueryRow(ctx, `UPDATE feed_state SET holder = $1, lease_until = $2
		WHERE id = 1 AND (holder = $1 OR lease_until < `+nowMillis+` OR lease_until = $2) RETURNING id`,
		holder, int64(lockedLease)).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		err = upstream.ErrNotConsumer // an earlier release's lease runs
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("feed holder: %w", err), lock.Close())
	}
	renew := func(context.Context) error { return nil } // the lock stands while its file is open
	release := func(ctx context.Context) error {
		cleared := db.Exec(ctx, `UPDATE feed_state SET lease_until = 0 WHERE id = 1 AND holder = $1`, holder)
		return errors.Join(cleared, lock.Close())
	}
	return &session{Session: sqlstore.NewSession(db, nowMillis, feedLease, renew, release), wal: s.path + "-wal"}, nil
}

// walSettle is how long after a change of the write-ahead log
// AwaitUndone asks again: a commit writes the log a moment before it is
// visible (an fsync on the way, with synchronous=FULL).
const walSettle = 50 * time.Millisecond

// session is the SQLite side of the feed's hold. Every commit, by any
// process, writes the write-ahead log: AwaitUndone asks the database when
// it starts, and then only when the log changes (inotify on Linux), so an
// idle consumer reads once a wait. It is called from one goroutine at a
// time, as the consumer does.
type session struct {
	*sqlstore.Session
	wal       string
	watch     *walWatch // nil until the first wait
	unwatched bool      // no watch could be made: waits poll
}

func (s *session) AwaitUndone(ctx context.Context, wait time.Duration) (bool, error) {
	if s.watch == nil && !s.unwatched {
		w, err := newWALWatch(s.wal)
		s.watch, s.unwatched = w, err != nil
	}
	if s.unwatched { // no inotify instance left (fs.inotify.max_user_instances): ask every sqlstore.AwaitEvery
		return s.Session.AwaitUndone(ctx, wait)
	}
	deadline := time.Now().Add(wait)
	recheck := s.watch.drain() // what changed before is seen by the first ask
	for {
		undone, err := s.Session.Undone(ctx)
		left := time.Until(deadline)
		if err != nil || undone || left <= 0 {
			return undone, err
		}
		d := left
		if recheck {
			d = min(walSettle, left) // once more, for a commit not yet visible
		}
		changed, err := s.watch.wait(ctx, d)
		if err != nil {
			return false, fmt.Errorf("feed await undone: %w", err)
		}
		if !changed && !recheck {
			return false, nil
		}
		recheck = changed
	}
}

// Close gives the feed up and ends the watch.
func (s *session) Close(ctx context.Context) error {
	err := s.Session.Close(ctx)
	if s.watch != nil {
		err = errors.Join(err, s.watch.Close())
	}
	return err
}

func (s *Store) feedDB() database {
	return database{Querier: sqlstore.Conn(s.db.QueryRowContext, s.db.ExecContext), db: s.db}
}

func (d database) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	rows, err := d.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

// sqlRows is *sql.Rows as sqlstore.Rows.
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }
