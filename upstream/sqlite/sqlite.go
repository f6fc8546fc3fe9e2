// Package sqlite is the upstream.Store on an SQLite file, through the pure-Go
// driver modernc.org/sqlite. The statements and flows are package
// sqlstore's; this package opens the file, keeps the schema version in
// PRAGMA user_version and translates the driver's constraint errors into the
// domain errors of package upstream.
//
// Its schema is the numbered steps in migrations/, embedded, of which Open
// applies those the file lacks, each in a transaction of its own.
//
// Concurrency: a Store is safe for concurrent use. The file is in WAL mode,
// so reads run alongside a write; every transaction takes the write lock at
// BEGIN (IMMEDIATE), which is all the locking an update or an import needs,
// and writers wait for each other up to the busy timeout.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/realty-gateway/gateway/upstream"
	"github.com/realty-gateway/gateway/upstream/internal/sqlstore"
)

// migrationFiles are the schema steps, loaded by Open: step i+1 brings a
// file from user_version i to i+1. Version 0 is also what files made before
// versioning are at; step 1 is their schema, kept idempotent.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// dsnParams are applied by the driver to every new connection.
const dsnParams = "_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_txlock=immediate"

// Extended result codes of SQLite (modernc.org/sqlite turns them on).
const (
	codeForeignKey = 787
	codePrimaryKey = 1555
	codeUnique     = 2067
)

// Store is the SQLite engine. Its methods but Ping, Close and Acquire
// are sqlstore.Store's and sqlstore.Feed's.
type Store struct {
	*sqlstore.Store
	*sqlstore.Feed
	db   *sql.DB
	path string // the file, beside which the feed's lock file lies
}

var (
	_ upstream.Store          = (*Store)(nil)
	_ upstream.StreamImporter = (*Store)(nil)
)

// Open opens or creates the database file at path, creating its directory
// when missing, and brings its schema up to date. A file whose schema is
// newer than this build knows is an error.
func Open(ctx context.Context, path string) (*Store, error) {
	steps, err := sqlstore.LoadSteps(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create directory of %s: %w", path, err)
	}
	sqlDB, err := sql.Open("sqlite", path+"?"+dsnParams)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	db := database{Querier: sqlstore.Conn(sqlDB.QueryRowContext, sqlDB.ExecContext), db: sqlDB}
	schema := sqlstore.Schema{Steps: steps, Version: userVersion, SetVersion: setUserVersion}
	if err := sqlstore.Migrate(ctx, db, schema); err != nil {
		return nil, errors.Join(fmt.Errorf("migrate %s: %w", path, err), sqlDB.Close())
	}
	store := sqlstore.New(sqlstore.Engine{DB: db, ConstraintError: constraintError, PositionalImport: true, NowMillis: nowMillis})
	return &Store{Store: store, Feed: sqlstore.NewFeed(db, nowMillis), db: sqlDB, path: path}, nil
}

// userVersion needs no lock of its own: the transaction holds the write
// lock from BEGIN, so processes opening the file at once apply each step
// once.
func userVersion(ctx context.Context, tx sqlstore.Querier) (version int, err error) {
	err = tx.QueryRow(ctx, `PRAGMA user_version`).Scan(&version)
	return version, err
}

func setUserVersion(ctx context.Context, tx sqlstore.Querier, version int) error {
	// PRAGMA takes no parameters; version is an int.
	return tx.Exec(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, version))
}

// Ping checks that the file can be reached through a connection.
func (s *Store) Ping(ctx context.Context) error {
	return s.db.PingContext(ctx)
}

func (s *Store) Close() error {
	return s.db.Close()
}

// database is the file's connection pool, as sqlstore.DB.
type database struct {
	sqlstore.Querier
	db *sql.DB
}

// Begin starts a transaction that holds the write lock already
// (_txlock=immediate): one that took it only at its first write could fail
// with SQLITE_BUSY halfway, rather than wait for the lock.
func (d database) Begin(ctx context.Context) (sqlstore.Tx, error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return transaction{Querier: sqlstore.Conn(tx.QueryRowContext, tx.ExecContext), tx: tx}, nil
}

// transaction is an *sql.Tx as sqlstore.Tx. database/sql binds a
// transaction to the context of BeginTx, so Commit and Rollback take none.
type transaction struct {
	sqlstore.Querier
	tx *sql.Tx
}

func (t transaction) Commit(context.Context) error { return t.tx.Commit() }

// Prepare prepares query once for many executions in the transaction:
// an import's multi-row INSERT, which SQLite would otherwise parse again
// each time.
func (t transaction) Prepare(ctx context.Context, query string) (func(context.Context, ...any) error, func() error, error) {
	st, err := t.tx.PrepareContext(ctx, query)
	if err != nil {
		return nil, nil, err
	}
	exec := func(ctx context.Context, args ...any) error {
		_, err := st.ExecContext(ctx, args...)
		return err
	}
	return exec, st.Close, nil
}

func (t transaction) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	rows, err := t.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

func (t transaction) Rollback(context.Context) error {
	if err := t.tx.Rollback(); !errors.Is(err, sql.ErrTxDone) {
		return err
	}
	return nil
}

// constraintError returns the domain error of a constraint violation, and
// nil for any other error.
func constraintError(err error) error {
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		switch coded.Code() {
		case codeUnique, codePrimaryKey:
			return upstream.ErrConflict
		case codeForeignKey:
			return upstream.ErrInvalid
		}
	}
	return nil
}
