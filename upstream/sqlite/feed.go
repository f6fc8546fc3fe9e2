package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/realty-gateway/gateway/upstream"
	"github.com/realty-gateway/gateway/upstream/internal/sqlstore"
)

// nowMillis is SQLite's clock in milliseconds since 1970 (julianday has
// millisecond precision; unixepoch('subsec') is younger than SQLite 3.40).
const nowMillis = `CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)`

// SQLite has no session locks: the feed is held through a lease in
// feed_state, which its holder renews; a holder that died loses it once
// feedLeaseTerm has passed. The holder stops applying after feedLease, well
// before another process may take the lease.
const (
	feedLeaseTerm = 6 * time.Second
	feedLease     = feedLeaseTerm / 2
)

var _ upstream.Feed = (*Store)(nil)

// Acquire takes the lease, or returns upstream.ErrNotConsumer while
// another holder's lease runs.
func (s *Store) Acquire(ctx context.Context, holder string) (upstream.FeedSession, error) {
	db := s.feedDB()
	take := func(ctx context.Context) error {
		var id int
		err := db.QueryRow(ctx, `UPDATE feed_state SET holder = $1, lease_until = `+nowMillis+` + $2
			WHERE id = 1 AND (holder = $1 OR lease_until < `+nowMillis+`) RETURNING id`,
			holder, feedLeaseTerm.Milliseconds()).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return upstream.ErrNotConsumer
		}
		return err
	}
	if err := take(ctx); err != nil {
		return nil, fmt.Errorf("feed lease: %w", err)
	}
	release := func(ctx context.Context) error {
		return db.Exec(ctx, `UPDATE feed_state SET lease_until = 0 WHERE id = 1 AND holder = $1`, holder)
	}
	return sqlstore.NewSession(db, nowMillis, feedLease, take, release), nil
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
