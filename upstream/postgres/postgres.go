// Package postgres is the upstream.Store on PostgreSQL, through a pgx v5
// connection pool. The statements and flows are package sqlstore's; this
// package connects, locks, keeps the schema version in the table
// schema_version, repeats the reads that a dead connection failed, and
// translates the server's constraint errors into the domain errors of
// package upstream.
//
// Its schema is the numbered steps in migrations/, embedded, of which Open
// applies those the database lacks, each in a transaction of its own under
// an advisory lock.
//
// Concurrency: a Store is safe for concurrent use. Imports lock the listings
// table against each other, so two of them never pick the same id or number;
// an update locks its row (SELECT ... FOR UPDATE) until it commits.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/realty-gateway/gateway/upstream"
	"github.com/realty-gateway/gateway/upstream/internal/sqlstore"
)

// migrationFiles are the schema steps, loaded by Open: step i+1 brings a
// database from version i to i+1. Version 0 (no schema_version rows) is also
// what databases made before versioning are at; step 1 is their schema,
// kept idempotent.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLock is the pg_advisory_xact_lock key held while a schema step is
// applied, so that processes starting at once do not race.
const migrationLock = 0x6761_7465_7761_7901 // "gateway" + 1

// SQLSTATE codes of the constraint violations that are domain errors.
const (
	codeForeignKey = "23503"
	codeUnique     = "23505"
)

// Options tunes the pool. Zero values keep pgx's defaults.
type Options struct {
	MaxConns         int32
	StatementTimeout time.Duration
	// Tracer, when set, sees every query (otelpgx's makes spans of them).
	Tracer pgx.QueryTracer
}

// Store is the PostgreSQL engine. Its methods but Ping, Close and Acquire
// are sqlstore.Store's and sqlstore.Feed's.
type Store struct {
	*sqlstore.Store
	*sqlstore.Feed
	pool *pgxpool.Pool
}

var (
	_ upstream.Store          = (*Store)(nil)
	_ upstream.StreamImporter = (*Store)(nil)
)

// Open connects to the database at url and brings its schema up to date. A
// database whose schema is newer than this build knows is an error.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	steps, err := sqlstore.LoadSteps(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse postgres url: %w", err)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if opts.StatementTimeout > 0 {
		ms := max(opts.StatementTimeout.Milliseconds(), 1)
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(ms, 10)
	}
	if opts.Tracer != nil {
		cfg.ConnConfig.Tracer = opts.Tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect postgres: %w", err)
	}
	db := database{Querier: sqlstore.Conn(pool.QueryRow, pool.Exec), pool: pool}
	schema := sqlstore.Schema{Steps: steps, Version: lockedVersion, SetVersion: setVersion}
	if err := sqlstore.Migrate(ctx, db, schema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("migrate postgres: %w", err)
	}
	lock := importLock
	switch lz4, err := hasLz4(ctx, db); {
	case err != nil:
		pool.Close()
		return nil, fmt.Errorf("toast compression: %w", err)
	case lz4:
		lock = importLz4 + lock
	}
	store := sqlstore.New(sqlstore.Engine{
		DB:              db,
		Lookups:         retryingReads{pool},
		RowLock:         "FOR UPDATE",
		ImportLock:      lock,
		ImportLookups:   importLookups,
		ImportWrites:    importWrites,
		ConstraintError: constraintError,
		NowMillis:       nowMillis,
	})
	return &Store{Store: store, Feed: sqlstore.NewFeed(db, nowMillis), pool: pool}, nil
}

// importLock begins an import: the lock conflicts with itself, not with
// reads. A batch's COPY of thousands of rows is not a request's
// statement: the serving statement_timeout gives way to a minute (a
// request's call stays bounded by its context's deadline).
const importLock = `SET LOCAL statement_timeout = '1min'; LOCK TABLE listings IN SHARE ROW EXCLUSIVE MODE`

// importLz4 compresses the import's documents and bodies, which TOAST
// compresses (two copies of a 1.7 KB listing pass its 2 KB threshold),
// with lz4 rather than pglz: pglz was a fifth of the backend's CPU in an
// import. Any session reads either. Only a server built with lz4 takes it.
const importLz4 = `SET LOCAL default_toast_compression = lz4; `

// An import asks the same lookups with thousands of parameters batch
// after batch; after five, PostgreSQL may switch to a generic plan, made
// while the table looked empty, that scans the table and compares each
// row with every parameter (measured: 1.5 s a batch at 50,000 rows).
// Custom plans see the values. The writes go back to the default, so that
// the change feed's row trigger plans its statements once, not per row
// (forced custom plans made a third of the backend's CPU in an import).
const (
	importLookups = `SET LOCAL plan_cache_mode = force_custom_plan`
	importWrites  = `SET LOCAL plan_cache_mode = auto`
)

// hasLz4 reports whether the server compresses TOAST values with lz4.
func hasLz4(ctx context.Context, db sqlstore.Querier) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `SELECT COALESCE(bool_or(enumvals @> ARRAY['lz4']), false)
		FROM pg_settings WHERE name = 'default_toast_compression'`).Scan(&ok)
	return ok, err
}

// lockedVersion takes the advisory lock, which the transaction holds until
// it ends, before it reads the version: processes starting at once apply
// each step once. The schema's steps are not a request's statements: the
// serving statement_timeout gives way, within this transaction, to Open's
// context (a step that rewrites a large table, or the wait for another
// process's steps, may take far longer than a read may).
func lockedVersion(ctx context.Context, tx sqlstore.Querier) (version int, err error) {
	if err := tx.Exec(ctx, `SET LOCAL statement_timeout = 0`); err != nil {
		return 0, fmt.Errorf("lift statement timeout: %w", err)
	}
	if err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
		return 0, err
	}
	err = tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
		version    INTEGER     PRIMARY KEY,
		applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
	)`)
	if err != nil {
		return 0, fmt.Errorf("create schema_version: %w", err)
	}
	err = tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&version)
	return version, err
}

func setVersion(ctx context.Context, tx sqlstore.Querier, version int) error {
	return tx.Exec(ctx, `INSERT INTO schema_version (version) VALUES ($1)`, version)
}

// Ping checks that the server answers on a connection of the pool.
func (s *Store) Ping(ctx context.Context) error {
	return s.pool.Ping(ctx)
}

// Close closes the pool, waiting for connections in use to be returned.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// database is the pool as sqlstore.DB.
type database struct {
	sqlstore.Querier
	pool *pgxpool.Pool
}

func (d database) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	return d.pool.Query(ctx, query, args...)
}

func (d database) Begin(ctx context.Context) (sqlstore.Tx, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return transaction{Querier: sqlstore.Conn(tx.QueryRow, tx.Exec), tx: tx}, nil
}

// transaction is a pgx.Tx as sqlstore.Tx.
type transaction struct {
	sqlstore.Querier
	tx pgx.Tx
}

func (t transaction) Commit(ctx context.Context) error { return t.tx.Commit(ctx) }

func (t transaction) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	return t.tx.Query(ctx, query, args...)
}

// CopyFrom loads rows with COPY: an import's listings, whose row trigger
// records each in the change feed as an INSERT would. pgx encodes the
// rows on a goroutine of its own and sends them as its buffer fills, so
// the server stores the first rows while row makes the later ones.
func (t transaction) CopyFrom(ctx context.Context, table string, columns []string, n int, row func(i int) ([]any, error)) error {
	i := 0
	_, err := t.tx.CopyFrom(ctx, pgx.Identifier{table}, columns, pgx.CopyFromFunc(func() ([]any, error) {
		if i == n {
			return nil, nil
		}
		i++
		return row(i - 1)
	}))
	return err
}

// Rollback runs even when ctx is what failed the transaction: a rollback
// that fails costs the pool its connection, which pgx closes.
func (t transaction) Rollback(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := t.tx.Rollback(ctx); !errors.Is(err, pgx.ErrTxClosed) {
		return err
	}
	return nil
}

// retryingReads runs each read once more when the connection it got had
// died under it (the server terminated it or restarted): reads are safe to
// repeat, and the pool hands out a fresh connection the second time.
type retryingReads struct{ pool *pgxpool.Pool }

func (r retryingReads) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return retryingRow{ctx: ctx, pool: r.pool, query: query, args: args}
}

// retryingRow holds its query until Scan, as pgx's own row does, so that
// Scan can run it again.
type retryingRow struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	query string
	args  []any
}

func (r retryingRow) Scan(dest ...any) error {
	err := r.pool.QueryRow(r.ctx, r.query, r.args...).Scan(dest...)
	if r.ctx.Err() != nil {
		return err
	}
	if terminatedByServer(err) {
		// The server ended its sessions; the pool's idle ones are dead too.
		r.pool.Reset()
	} else if !deadConnection(err) {
		return err
	}
	return r.pool.QueryRow(r.ctx, r.query, r.args...).Scan(dest...)
}

// terminatedByServer reports an administrator's or a crash's termination
// of the session (SQLSTATE 57P01, 57P02).
func terminatedByServer(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "57P01" || pgErr.Code == "57P02")
}

// deadConnection reports whether err says the connection, not the query,
// failed.
func deadConnection(err error) bool {
	var pgErr *pgconn.PgError
	if err == nil || errors.As(err, &pgErr) {
		return false
	}
	return pgconn.SafeToRetry(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// constraintError returns the domain error of a constraint violation, and
// nil for any other error.
func constraintError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case codeUnique:
			return upstream.ErrConflict
		case codeForeignKey:
			return upstream.ErrInvalid
		}
	}
	return nil
}
