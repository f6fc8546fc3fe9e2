// Package sqlstore is the one copy of what the SQL engines of package
// upstream have in common: the statements, the flow of every upstream.Store
// method but Ping and Close, the import algorithm and the migration loop.
// An engine supplies only what differs, through Engine and Schema: its
// driver behind Querier and Tx, its locking, its constraint error codes and
// where it records its schema version. With one copy the engines cannot
// drift apart; the conformance suite in package storetest checks what their
// dialects still decide.
//
// The statements run on both SQLite and PostgreSQL as written. Their
// parameters are numbered ($1, $2...), PostgreSQL's form, which
// modernc.org/sqlite binds by number as well. A deleted listing stays as a
// tombstone row (deleted is true): the reads and writes of a listing skip
// it, while imports still count its id and number as taken, so that they
// are never given out again. A disabled user stays as a row as well
// (disabled is true): the lookup by e-mail that login uses skips it, while
// its listings keep their owner and its e-mail stays taken.
//
// Concurrency: a Store is safe for concurrent use when its engine's DB is.
// It keeps no state between calls; a write that reads first runs in one
// transaction, which the engine's locking keeps apart from the others.
package sqlstore

import (
	"context"
	"errors"
	"fmt"
)

// Row is one result row, as *sql.Row and pgx.Row are. When the query found
// no row, Scan returns an error that is sql.ErrNoRows (pgx.ErrNoRows is).
type Row interface {
	Scan(dest ...any) error
}

// RowQuerier runs a query for at most one row.
type RowQuerier interface {
	QueryRow(ctx context.Context, query string, args ...any) Row
}

// Querier runs statements on a database or in a transaction.
type Querier interface {
	RowQuerier
	// Exec runs a statement and drops its result. Without args, it may run
	// several statements at once (a schema step).
	Exec(ctx context.Context, query string, args ...any) error
}

// Tx is a transaction. Rollback of a transaction that is over already
// returns nil, so that it can be deferred; it runs even when ctx is done,
// as that is often why the transaction is rolled back.
type Tx interface {
	Querier
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// DB is an engine's pool of connections.
type DB interface {
	Querier
	Begin(ctx context.Context) (Tx, error)
}

// Conn makes a Querier of a driver's own QueryRow and Exec, of a pool or a
// transaction: Conn(tx.QueryRowContext, tx.ExecContext) for database/sql,
// Conn(tx.QueryRow, tx.Exec) for pgx. Neither is a Querier as it is, since
// their results are the driver's own types.
func Conn[R Row, Result any](
	queryRow func(ctx context.Context, query string, args ...any) R,
	exec func(ctx context.Context, query string, args ...any) (Result, error),
) Querier {
	return conn[R, Result]{queryRow: queryRow, exec: exec}
}

type conn[R Row, Result any] struct {
	queryRow func(ctx context.Context, query string, args ...any) R
	exec     func(ctx context.Context, query string, args ...any) (Result, error)
}

func (c conn[R, Result]) QueryRow(ctx context.Context, query string, args ...any) Row {
	return c.queryRow(ctx, query, args...)
}

func (c conn[R, Result]) Exec(ctx context.Context, query string, args ...any) error {
	_, err := c.exec(ctx, query, args...)
	return err
}

// inTx runs fn in a transaction of db and commits it. Any error, fn's own
// included, rolls the transaction back.
func inTx(ctx context.Context, db DB, fn func(tx Querier) error) (err error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if rbErr := tx.Rollback(ctx); err != nil && rbErr != nil {
			err = errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
