// Package postgres is the upstream.Store on PostgreSQL, through a pgx v5
// connection pool. It owns its schema: the numbered steps in migrations/,
// embedded, of which Open applies those the database lacks, each in a
// transaction of its own under an advisory lock that also records it in the
// table schema_version. It translates the driver's errors into the domain
// errors of package upstream.
//
// A deleted listing stays as a tombstone row (deleted = true): reads skip
// it, while imports still count its id and number as taken.
//
// Concurrency: a Store is safe for concurrent use. Imports lock the listings
// table against each other, so two of them never pick the same id or number;
// an update locks its row (SELECT ... FOR UPDATE) until it commits.
package postgres

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
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
}

// Store is the PostgreSQL engine.
type Store struct {
	pool *pgxpool.Pool
}

var _ upstream.Store = (*Store)(nil)

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
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect postgres: %w", err)
	}
	if err := migrate(ctx, pool, steps); err != nil {
		pool.Close()
		return nil, fmt.Errorf("migrate postgres: %w", err)
	}
	return &Store{pool: pool}, nil
}

// migrate applies the missing steps one by one, each in a transaction.
func migrate(ctx context.Context, pool *pgxpool.Pool, steps []string) error {
	for {
		var done bool
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			done, err = migrateStep(ctx, tx, steps)
			return err
		})
		if err != nil || done {
			return err
		}
	}
}

// migrateStep applies the step after the database's version and records
// it, under the advisory lock. It reports done when the database is up to
// date.
func migrateStep(ctx context.Context, tx pgx.Tx, steps []string) (done bool, err error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
		return false, err
	}
	_, err = tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
		version    INTEGER     PRIMARY KEY,
		applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
	)`)
	if err != nil {
		return false, fmt.Errorf("create schema_version: %w", err)
	}
	var version int
	if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&version); err != nil {
		return false, fmt.Errorf("read schema version: %w", err)
	}
	switch {
	case version > len(steps):
		return false, fmt.Errorf("schema version %d is newer than this build knows (%d)", version, len(steps))
	case version == len(steps):
		return true, nil
	}
	// Without arguments Exec uses the simple protocol, which runs several
	// statements.
	if _, err := tx.Exec(ctx, steps[version]); err != nil {
		return false, fmt.Errorf("schema step %d: %w", version+1, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO schema_version (version) VALUES ($1)`, version+1); err != nil {
		return false, fmt.Errorf("schema step %d: record version: %w", version+1, err)
	}
	return false, nil
}

// rollback ends tx when err is set, adding the rollback's own failure.
func rollback(ctx context.Context, tx pgx.Tx, err error) error {
	// The rollback must run even when ctx is what failed.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if rbErr := tx.Rollback(ctx); err != nil && rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) {
		return errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
	}
	return err
}

// ListingByID returns the listing with this id, unless it is deleted.
func (s *Store) ListingByID(ctx context.Context, id int64) (upstream.Listing, error) {
	var l upstream.Listing
	err := s.read(ctx, func(row pgx.Row) (err error) {
		l, err = scanListing(row)
		return err
	}, `SELECT revision, document FROM listings WHERE id = $1 AND NOT deleted`, id)
	if err != nil {
		return upstream.Listing{}, fmt.Errorf("listing %d: %w", id, err)
	}
	return l, nil
}

// ListingByNumber returns the listing with this firm and number, unless it
// is deleted.
func (s *Store) ListingByNumber(ctx context.Context, firmID, no int64) (upstream.Listing, error) {
	var l upstream.Listing
	err := s.read(ctx, func(row pgx.Row) (err error) {
		l, err = scanListing(row)
		return err
	}, `SELECT revision, document FROM listings WHERE firm_id = $1 AND no = $2 AND NOT deleted`, firmID, no)
	if err != nil {
		return upstream.Listing{}, fmt.Errorf("listing %s: %w", upstream.ListingNumber(firmID, no), err)
	}
	return l, nil
}

func scanListing(row pgx.Row) (upstream.Listing, error) {
	var (
		l        upstream.Listing
		revision int64
		doc      []byte
	)
	if err := row.Scan(&revision, &doc); err != nil {
		return l, notFound(err)
	}
	if err := json.Unmarshal(doc, &l); err != nil {
		return upstream.Listing{}, fmt.Errorf("decode document: %w", err)
	}
	l.Revision = revision
	l.Normalize()
	return l, nil
}

// UpdateListing replaces listing l.ID of firm l.FirmID in one transaction,
// which locks the row from the read on.
func (s *Store) UpdateListing(ctx context.Context, l upstream.Listing) (_ upstream.Listing, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return upstream.Listing{}, fmt.Errorf("update listing %d: %w", l.ID, err)
	}
	defer func() { err = rollback(ctx, tx, err) }()

	row := tx.QueryRow(ctx,
		`SELECT revision, document FROM listings WHERE id = $1 AND firm_id = $2 AND NOT deleted FOR UPDATE`,
		l.ID, l.FirmID)
	stored, err := scanListing(row)
	if err != nil {
		return upstream.Listing{}, fmt.Errorf("update listing %d of firm %d: %w", l.ID, l.FirmID, err)
	}
	l, err = stored.Replaced(l, time.Now().UnixMilli())
	if err != nil {
		return upstream.Listing{}, err
	}
	doc, err := json.Marshal(l)
	if err != nil {
		return upstream.Listing{}, fmt.Errorf("update listing %d: encode: %w", l.ID, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE listings SET is_active = $1, revision = $2, document = $3 WHERE id = $4`,
		l.IsActive, l.Revision, string(doc), l.ID); err != nil {
		return upstream.Listing{}, fmt.Errorf("update listing %d: %w", l.ID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return upstream.Listing{}, fmt.Errorf("update listing %d: commit: %w", l.ID, err)
	}
	return l, nil
}

// DeleteListing turns listing id of firm firmID into a tombstone, in one
// statement, and returns it as it was with the raised revision. Of two
// deletes at once, the second waits for the first's row lock and then finds
// the row deleted.
func (s *Store) DeleteListing(ctx context.Context, firmID, id int64) (upstream.Listing, error) {
	row := s.pool.QueryRow(ctx,
		`UPDATE listings SET deleted = true, revision = revision + 1
		 WHERE id = $1 AND firm_id = $2 AND NOT deleted
		 RETURNING revision, document`, id, firmID)
	l, err := scanListing(row)
	if err != nil {
		return upstream.Listing{}, fmt.Errorf("delete listing %d of firm %d: %w", id, firmID, err)
	}
	return l, nil
}

// FirmByKeyDigest returns the firm whose API key has this digest.
func (s *Store) FirmByKeyDigest(ctx context.Context, digest []byte) (upstream.Firm, error) {
	var f upstream.Firm
	err := s.read(ctx, func(row pgx.Row) error {
		return row.Scan(&f.ID, &f.Name)
	}, `SELECT id, name FROM firms WHERE key_digest = $1`, digest)
	if err != nil {
		return upstream.Firm{}, fmt.Errorf("firm by key digest: %w", notFound(err))
	}
	return f, nil
}

// UserByEmail returns the firm's user with this e-mail, compared normalized.
func (s *Store) UserByEmail(ctx context.Context, firmID int64, email string) (upstream.User, error) {
	var u upstream.User
	err := s.read(ctx, func(row pgx.Row) error {
		return row.Scan(&u.ID, &u.FirmID, &u.Email, &u.PasswordHash)
	}, `SELECT id, firm_id, email, password_hash FROM firm_users WHERE firm_id = $1 AND email = $2`,
		firmID, upstream.NormalizeEmail(email))
	if err != nil {
		return upstream.User{}, fmt.Errorf("user of firm %d: %w", firmID, notFound(err))
	}
	return u, nil
}

// AddFirm stores a firm; a digest already stored is ErrConflict.
func (s *Store) AddFirm(ctx context.Context, name string, keyDigest []byte) (upstream.Firm, error) {
	if strings.TrimSpace(name) == "" || len(keyDigest) == 0 {
		return upstream.Firm{}, fmt.Errorf("firm needs a name and a key digest: %w", upstream.ErrInvalid)
	}
	f := upstream.Firm{Name: name}
	err := s.pool.QueryRow(ctx,
		`INSERT INTO firms (name, key_digest) VALUES ($1, $2) RETURNING id`, name, keyDigest).
		Scan(&f.ID)
	if err != nil {
		if ce := constraintError(err); ce != nil {
			return upstream.Firm{}, fmt.Errorf("add firm %q: key digest taken: %w", name, ce)
		}
		return upstream.Firm{}, fmt.Errorf("add firm %q: %w", name, err)
	}
	return f, nil
}

// AddUser stores a user with its e-mail normalized. A taken e-mail within
// the firm is ErrConflict, an unknown firm ErrInvalid.
func (s *Store) AddUser(ctx context.Context, u upstream.User) (upstream.User, error) {
	u.Email = upstream.NormalizeEmail(u.Email)
	if u.Email == "" {
		return upstream.User{}, fmt.Errorf("user of firm %d needs an e-mail: %w", u.FirmID, upstream.ErrInvalid)
	}
	err := s.pool.QueryRow(ctx,
		`INSERT INTO firm_users (firm_id, email, password_hash) VALUES ($1, $2, $3) RETURNING id`,
		u.FirmID, u.Email, u.PasswordHash).
		Scan(&u.ID)
	if err != nil {
		switch ce := constraintError(err); {
		case errors.Is(ce, upstream.ErrConflict):
			return upstream.User{}, fmt.Errorf("add user of firm %d: e-mail taken: %w", u.FirmID, ce)
		case errors.Is(ce, upstream.ErrInvalid):
			return upstream.User{}, fmt.Errorf("add user: unknown firm %d: %w", u.FirmID, ce)
		}
		return upstream.User{}, fmt.Errorf("add user of firm %d: %w", u.FirmID, err)
	}
	return u, nil
}

// ImportListings stores the listings in one transaction: all or none.
func (s *Store) ImportListings(ctx context.Context, ls []upstream.Listing) (_ []upstream.Listing, err error) {
	if len(ls) == 0 {
		return []upstream.Listing{}, nil
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	defer func() { err = rollback(ctx, tx, err) }()

	// Conflicts with itself, not with reads: imports run one at a time.
	if _, err := tx.Exec(ctx, `LOCK TABLE listings IN SHARE ROW EXCLUSIVE MODE`); err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	out, err := sqlstore.Import(ctx, importTx{tx}, ls, time.Now().UnixMilli())
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("import: commit: %w", err)
	}
	return out, nil
}

// importTx is the SQL of an import, in its transaction under the table lock.
type importTx struct{ tx pgx.Tx }

func (t importTx) FirmExists(ctx context.Context, firmID int64) (exists bool, err error) {
	err = t.tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM firms WHERE id = $1)`, firmID).Scan(&exists)
	return exists, err
}

func (t importTx) UserFirm(ctx context.Context, userID int64) (firmID int64, err error) {
	err = t.tx.QueryRow(ctx, `SELECT firm_id FROM firm_users WHERE id = $1`, userID).Scan(&firmID)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return firmID, err
}

func (t importTx) IDTaken(ctx context.Context, id int64) (taken bool, err error) {
	err = t.tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM listings WHERE id = $1)`, id).Scan(&taken)
	return taken, err
}

func (t importTx) NoTaken(ctx context.Context, firmID, no int64) (taken bool, err error) {
	err = t.tx.QueryRow(ctx,
		`SELECT EXISTS (SELECT 1 FROM listings WHERE firm_id = $1 AND no = $2)`, firmID, no).Scan(&taken)
	return taken, err
}

func (t importTx) MaxID(ctx context.Context) (id int64, err error) {
	err = t.tx.QueryRow(ctx, `SELECT COALESCE(MAX(id), 0) FROM listings`).Scan(&id)
	return id, err
}

func (t importTx) MaxNo(ctx context.Context, firmID int64) (no int64, err error) {
	err = t.tx.QueryRow(ctx, `SELECT COALESCE(MAX(no), 0) FROM listings WHERE firm_id = $1`, firmID).Scan(&no)
	return no, err
}

func (t importTx) Insert(ctx context.Context, l upstream.Listing, doc []byte) error {
	_, err := t.tx.Exec(ctx,
		`INSERT INTO listings (id, firm_id, no, firm_user_id, is_active, revision, document)
		 VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		l.ID, l.FirmID, l.No, l.FirmUserID, l.IsActive, l.Revision, string(doc))
	if ce := constraintError(err); ce != nil {
		return ce
	}
	return err
}

// Empty reports whether no firm is stored.
func (s *Store) Empty(ctx context.Context) (bool, error) {
	var empty bool
	if err := s.pool.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM firms)`).Scan(&empty); err != nil {
		return false, fmt.Errorf("empty: %w", err)
	}
	return empty, nil
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	return s.pool.Ping(ctx)
}

// Close closes the pool, waiting for connections in use to be returned.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// read runs a one-row read, and once more when the connection it got had
// died under it (the server terminated it or restarted): reads are safe to
// repeat, and the pool hands out a fresh connection the second time.
func (s *Store) read(ctx context.Context, scan func(pgx.Row) error, sql string, args ...any) error {
	err := scan(s.pool.QueryRow(ctx, sql, args...))
	if ctx.Err() != nil {
		return err
	}
	if terminatedByServer(err) {
		// The server ended its sessions; the pool's idle ones are dead too.
		s.pool.Reset()
	} else if !deadConnection(err) {
		return err
	}
	return scan(s.pool.QueryRow(ctx, sql, args...))
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

func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return upstream.ErrNotFound
	}
	return err
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
