package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/realty-gateway/gateway/upstream"
	"github.com/realty-gateway/gateway/upstream/internal/sqlstore"
)

// nowMillis is the database's clock in milliseconds since 1970.
const nowMillis = `floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`

// feedLock is the advisory lock that the consumer of the change feed holds
// on its own session.
const feedLock = 0x6761_7465_7761_7902 // "gateway" + 2

// feedLockHeld asks whether a session of this database holds the feed's
// lock: pg_locks shows a bigint key as its high half in classid and its
// low half in objid.
var feedLockHeld = fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM pg_locks
	WHERE locktype = 'advisory' AND classid = %d AND objid = %d AND objsubid = 1 AND granted
	  AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`,
	uint32(feedLock>>32), uint32(feedLock&0xffff_ffff))

// The consumer's session: the server ends it once it has been idle for
// feedIdleTimeout (PostgreSQL 14 and later), which releases the lock of a
// consumer whose connection passes no bytes any more but never closed; the
// TCP keepalives release it where the peer vanished. The consumer renews
// far more often than that, and stops applying once feedLease has passed
// since its last successful call, before anyone else can hold the lock.
const (
	feedIdleTimeout = 10 * time.Second
	feedLease       = feedIdleTimeout / 2
	keepAliveIdle   = 5 * time.Second
	keepAliveEvery  = 2 * time.Second
	keepAliveCount  = 3
	// cancelGrace is how long a statement whose context ended is given
	// to end at the server's cancel request before its connection, and
	// with it the hold, is closed.
	cancelGrace = time.Second
	// clientCheckEvery is how often the server checks, during a statement,
	// that the consumer's connection is still open (PostgreSQL 14).
	clientCheckEvery = 250 * time.Millisecond
)

var _ upstream.Feed = (*Store)(nil)

// Acquire opens a session of its own and takes the feed's advisory lock
// on it, without waiting; while another session holds it, it returns
// upstream.ErrNotConsumer.
func (s *Store) Acquire(ctx context.Context, holder string) (upstream.FeedSession, error) {
	// Asked on the pool first, so that gateways waiting for the feed do
	// not open a session each time they ask.
	var held bool
	if err := s.pool.QueryRow(ctx, feedLockHeld).Scan(&held); err != nil {
		return nil, fmt.Errorf("feed lock: %w", err)
	}
	if held {
		return nil, upstream.ErrNotConsumer
	}
	conn, err := s.connectFeedSession(ctx)
	if err != nil {
		return nil, err
	}
	if err := takeFeedLock(ctx, conn, holder); err != nil {
		closeFeedSession(ctx, conn)
		return nil, err
	}
	db := connDB{conn}
	renew := func(ctx context.Context) error {
		_, err := conn.Exec(ctx, `SELECT 1`)
		return lostHold(conn, err)
	}
	release := func(ctx context.Context) error {
		_, unlockErr := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, int64(feedLock))
		return errors.Join(unlockErr, conn.Close(ctx))
	}
	fs := &feedSession{Session: sqlstore.NewSession(db, nowMillis, feedLease, renew, release), conn: conn}
	fs.longest = awaitLongest(ctx, conn)
	return fs, nil
}

// lostHold marks err as the loss of the hold where the session closed:
// the lock went with it.
func lostHold(conn *pgx.Conn, err error) error {
	if err != nil && conn.IsClosed() {
		return fmt.Errorf("feed session closed: %w: %w", upstream.ErrNotConsumer, err)
	}
	return err
}

// awaitUndoneFunc waits on the server, on the consumer's session, until a
// change is not done or wait_ms have passed, looking every every_ms: one
// round trip a wait instead of one a look. Each look is a statement of its
// own, with its own snapshot, so it sees what others committed meanwhile.
const awaitUndoneFunc = `CREATE OR REPLACE FUNCTION pg_temp.gateway_await_undone(wait_ms bigint, every_ms bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
	deadline timestamptz := clock_timestamp() + wait_ms * interval '1 millisecond';
	left_ms double precision;
BEGIN
	LOOP
		IF EXISTS (SELECT 1 FROM listing_changes WHERE done_at IS NULL) THEN
			RETURN true;
		END IF;
		left_ms := extract(epoch FROM deadline - clock_timestamp()) * 1000;
		IF left_ms <= 0 THEN
			RETURN false;
		END IF;
		PERFORM pg_sleep(least(every_ms, left_ms) / 1000.0);
	END LOOP;
END $$`

// feedSession is the consumer's session: the shared statements, and a
// wait on the server for undone changes.
type feedSession struct {
	*sqlstore.Session
	conn *pgx.Conn
	// longest bounds one wait on the server, under the session's
	// statement_timeout; 0: no wait on the server.
	longest time.Duration
}

// AwaitUndone waits on the server (awaitUndoneFunc), up to the longest
// wait that the statement timeout allows, looking every
// sqlstore.AwaitEvery. A wait that its context ends is cancelled on the
// server, and the session lives on (see connectFeedSession); one whose
// client vanished ends at client_connection_check_interval.
func (s *feedSession) AwaitUndone(ctx context.Context, wait time.Duration) (bool, error) {
	if s.longest <= 0 {
		return s.Session.AwaitUndone(ctx, wait)
	}
	wait = min(wait, s.longest)
	var undone bool
	err := s.conn.QueryRow(ctx, `SELECT pg_temp.gateway_await_undone($1, $2)`,
		wait.Milliseconds(), sqlstore.AwaitEvery.Milliseconds()).Scan(&undone)
	if err != nil {
		return false, fmt.Errorf("feed await undone: %w", lostHold(s.conn, err))
	}
	return undone, nil
}

// awaitLongest creates awaitUndoneFunc on conn and returns the longest
// wait on the server that the session's statement_timeout allows: three
// quarters of it. It returns 0 where the function cannot be made (no TEMP
// privilege): AwaitUndone then polls.
func awaitLongest(ctx context.Context, conn *pgx.Conn) time.Duration {
	var timeoutMS int64
	if err := conn.QueryRow(ctx, `SELECT setting::bigint FROM pg_settings WHERE name = 'statement_timeout'`).Scan(&timeoutMS); err != nil {
		return 0
	}
	if _, err := conn.Exec(ctx, awaitUndoneFunc); err != nil {
		return 0
	}
	if timeoutMS <= 0 {
		return time.Hour
	}
	return time.Duration(timeoutMS) * time.Millisecond * 3 / 4
}

// connectFeedSession opens the consumer's own session: TCP keepalives on
// both sides, and the server's bounds on a silent peer.
func (s *Store) connectFeedSession(ctx context.Context) (*pgx.Conn, error) {
	cfg := s.pool.Config().ConnConfig.Copy()
	dialer := &net.Dialer{
		Timeout: 5 * time.Second,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: keepAliveIdle, Interval: keepAliveEvery, Count: keepAliveCount,
		},
	}
	cfg.DialFunc = dialer.DialContext
	cfg.Tracer = nil // the feed's polls are not requests
	// A statement that outlives its context is cancelled by the server,
	// and the session lives on: pgx's default closes the connection, which
	// gives the feed up on one slow statement. A server that does not
	// answer the cancel request still has the connection closed, after
	// cancelGrace.
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: cancelGrace}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("feed session: %w", err)
	}
	// The server's side of the keepalives, and its bound on a silent peer.
	for _, set := range []string{
		fmt.Sprintf("SET tcp_keepalives_idle = %d", int(keepAliveIdle.Seconds())),
		fmt.Sprintf("SET tcp_keepalives_interval = %d", int(keepAliveEvery.Seconds())),
		fmt.Sprintf("SET tcp_keepalives_count = %d", keepAliveCount),
		fmt.Sprintf("SET tcp_user_timeout = %d", feedIdleTimeout.Milliseconds()),
		fmt.Sprintf("SET idle_session_timeout = %d", feedIdleTimeout.Milliseconds()),
		// A wait on the server (AwaitUndone) ends soon after its client
		// closed the connection, rather than at its own end.
		fmt.Sprintf("SET client_connection_check_interval = %d", clientCheckEvery.Milliseconds()),
	} {
		if _, err := conn.Exec(ctx, set); err != nil && !unknownSetting(err) {
			closeFeedSession(ctx, conn)
			return nil, fmt.Errorf("feed session: %w", err)
		}
	}
	return conn, nil
}

// takeFeedLock takes the feed's advisory lock on conn, without waiting,
// and names holder in feed_state; while another session holds the lock,
// it returns upstream.ErrNotConsumer.
func takeFeedLock(ctx context.Context, conn *pgx.Conn, holder string) error {
	var held bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(feedLock)).Scan(&held); err != nil {
		return fmt.Errorf("feed lock: %w", err)
	}
	if !held {
		return upstream.ErrNotConsumer
	}
	if _, err := conn.Exec(ctx, `UPDATE feed_state SET holder = $1 WHERE id = 1`, holder); err != nil {
		return fmt.Errorf("feed holder: %w", err)
	}
	return nil
}

// closeFeedSession closes a session that Acquire gives up, within a
// second, even where ctx has ended.
func closeFeedSession(ctx context.Context, conn *pgx.Conn) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = conn.Close(cctx)
}

// unknownSetting reports a server too old for a setting (idle_session_timeout
// is PostgreSQL 14's): the keepalives still bound a vanished peer.
func unknownSetting(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42704"
}

// connDB is one connection as sqlstore.FeedDB. Like the connection, it is
// for one goroutine at a time.
type connDB struct{ conn *pgx.Conn }

func (c connDB) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return c.conn.QueryRow(ctx, query, args...)
}

func (c connDB) Exec(ctx context.Context, query string, args ...any) error {
	_, err := c.conn.Exec(ctx, query, args...)
	return err
}

func (c connDB) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	return c.conn.Query(ctx, query, args...)
}

func (c connDB) Begin(ctx context.Context) (sqlstore.Tx, error) {
	tx, err := c.conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return transaction{Querier: sqlstore.Conn(tx.QueryRow, tx.Exec), tx: tx}, nil
}
