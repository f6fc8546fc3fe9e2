// Package sqlite is the upstream.Store on an SQLite file, through the pure-Go
// driver modernc.org/sqlite. It owns its schema: the numbered steps in
// migrations/, embedded, of which Open applies those the file lacks, each in
// a transaction of its own that also records it in PRAGMA user_version. It
// translates the driver's errors into the domain errors of package upstream.
//
// A deleted listing stays as a tombstone row (deleted = 1): reads skip it,
// while imports still count its id and number as taken.
//
// Concurrency: a Store is safe for concurrent use. The file is in WAL mode,
// so reads run alongside a write; every transaction takes the write lock at
// BEGIN (IMMEDIATE), and writers wait for each other up to the busy timeout.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

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

// Store is the SQLite engine.
type Store struct {
	db *sql.DB
}

var _ upstream.Store = (*Store)(nil)

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
	db, err := sql.Open("sqlite", path+"?"+dsnParams)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	s := &Store{db: db}
	if err := s.migrate(ctx, steps); err != nil {
		return nil, errors.Join(fmt.Errorf("migrate %s: %w", path, err), db.Close())
	}
	return s, nil
}

// migrate applies the missing steps one by one.
func (s *Store) migrate(ctx context.Context, steps []string) error {
	for {
		done, err := s.migrateStep(ctx, steps)
		if err != nil || done {
			return err
		}
	}
}

// migrateStep applies the step after the file's version and records it, in
// one transaction that holds the write lock from BEGIN, so that processes
// opening the file at once apply each step once. It reports done when the
// file is up to date.
func (s *Store) migrateStep(ctx context.Context, steps []string) (done bool, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() { err = rollback(tx, err) }()
	var version int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		return false, fmt.Errorf("read schema version: %w", err)
	}
	switch {
	case version > len(steps):
		return false, fmt.Errorf("schema version %d is newer than this build knows (%d)", version, len(steps))
	case version == len(steps):
		return true, tx.Commit()
	}
	if _, err := tx.ExecContext(ctx, steps[version]); err != nil {
		return false, fmt.Errorf("schema step %d: %w", version+1, err)
	}
	// PRAGMA takes no parameters; version is an int.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, version+1)); err != nil {
		return false, fmt.Errorf("schema step %d: record version: %w", version+1, err)
	}
	return false, tx.Commit()
}

// rollback ends tx when err is set, adding the rollback's own failure.
func rollback(tx *sql.Tx, err error) error {
	if rbErr := tx.Rollback(); err != nil && rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
		return errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
	}
	return err
}

// ListingByID returns the listing with this id, unless it is deleted.
func (s *Store) ListingByID(ctx context.Context, id int64) (upstream.Listing, error) {
	row := s.db.QueryRowContext(ctx, `SELECT revision, document FROM listings WHERE id = ? AND NOT deleted`, id)
	l, err := scanListing(row)
	if err != nil {
		return upstream.Listing{}, fmt.Errorf("listing %d: %w", id, err)
	}
	return l, nil
}

// ListingByNumber returns the listing with this firm and number, unless it
// is deleted.
func (s *Store) ListingByNumber(ctx context.Context, firmID, no int64) (upstream.Listing, error) {
	row := s.db.QueryRowContext(ctx,
		`SELECT revision, document FROM listings WHERE firm_id = ? AND no = ? AND NOT deleted`, firmID, no)
	l, err := scanListing(row)
	if err != nil {
		return upstream.Listing{}, fmt.Errorf("listing %s: %w", upstream.ListingNumber(firmID, no), err)
	}
	return l, nil
}

func scanListing(row *sql.Row) (upstream.Listing, error) {
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
// which holds the write lock from BEGIN.
func (s *Store) UpdateListing(ctx context.Context, l upstream.Listing) (_ upstream.Listing, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return upstream.Listing{}, fmt.Errorf("update listing %d: %w", l.ID, err)
	}
	defer func() { err = rollback(tx, err) }()

	row := tx.QueryRowContext(ctx,
		`SELECT revision, document FROM listings WHERE id = ? AND firm_id = ? AND NOT deleted`, l.ID, l.FirmID)
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
	if _, err := tx.ExecContext(ctx, `UPDATE listings SET is_active = ?, revision = ?, document = ? WHERE id = ?`,
		l.IsActive, l.Revision, string(doc), l.ID); err != nil {
		return upstream.Listing{}, fmt.Errorf("update listing %d: %w", l.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return upstream.Listing{}, fmt.Errorf("update listing %d: commit: %w", l.ID, err)
	}
	return l, nil
}

// DeleteListing turns listing id of firm firmID into a tombstone, in one
// statement, and returns it as it was with the raised revision.
func (s *Store) DeleteListing(ctx context.Context, firmID, id int64) (upstream.Listing, error) {
	row := s.db.QueryRowContext(ctx,
		`UPDATE listings SET deleted = 1, revision = revision + 1
		 WHERE id = ? AND firm_id = ? AND NOT deleted
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
	err := s.db.QueryRowContext(ctx, `SELECT id, name FROM firms WHERE key_digest = ?`, digest).
		Scan(&f.ID, &f.Name)
	if err != nil {
		return upstream.Firm{}, fmt.Errorf("firm by key digest: %w", notFound(err))
	}
	return f, nil
}

// UserByEmail returns the firm's user with this e-mail, compared normalized.
func (s *Store) UserByEmail(ctx context.Context, firmID int64, email string) (upstream.User, error) {
	var u upstream.User
	err := s.db.QueryRowContext(ctx,
		`SELECT id, firm_id, email, password_hash FROM firm_users WHERE firm_id = ? AND email = ?`,
		firmID, upstream.NormalizeEmail(email)).
		Scan(&u.ID, &u.FirmID, &u.Email, &u.PasswordHash)
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
	err := s.db.QueryRowContext(ctx,
		`INSERT INTO firms (name, key_digest) VALUES (?, ?) RETURNING id`, name, keyDigest).
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
	err := s.db.QueryRowContext(ctx,
		`INSERT INTO firm_users (firm_id, email, password_hash) VALUES (?, ?, ?) RETURNING id`,
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

// ImportListings stores the listings in one transaction, which holds the
// write lock from BEGIN: all or none.
func (s *Store) ImportListings(ctx context.Context, ls []upstream.Listing) (_ []upstream.Listing, err error) {
	if len(ls) == 0 {
		return []upstream.Listing{}, nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	defer func() { err = rollback(tx, err) }()

	out, err := sqlstore.Import(ctx, importTx{tx}, ls, time.Now().UnixMilli())
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("import: commit: %w", err)
	}
	return out, nil
}

// importTx is the SQL of an import, in its transaction.
type importTx struct{ tx *sql.Tx }

func (t importTx) FirmExists(ctx context.Context, firmID int64) (exists bool, err error) {
	err = t.tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM firms WHERE id = ?)`, firmID).Scan(&exists)
	return exists, err
}

func (t importTx) UserFirm(ctx context.Context, userID int64) (firmID int64, err error) {
	err = t.tx.QueryRowContext(ctx, `SELECT firm_id FROM firm_users WHERE id = ?`, userID).Scan(&firmID)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return firmID, err
}

func (t importTx) IDTaken(ctx context.Context, id int64) (taken bool, err error) {
	err = t.tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM listings WHERE id = ?)`, id).Scan(&taken)
	return taken, err
}

func (t importTx) NoTaken(ctx context.Context, firmID, no int64) (taken bool, err error) {
	err = t.tx.QueryRowContext(ctx,
		`SELECT EXISTS (SELECT 1 FROM listings WHERE firm_id = ? AND no = ?)`, firmID, no).Scan(&taken)
	return taken, err
}

func (t importTx) MaxID(ctx context.Context) (id int64, err error) {
	err = t.tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM listings`).Scan(&id)
	return id, err
}

func (t importTx) MaxNo(ctx context.Context, firmID int64) (no int64, err error) {
	err = t.tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(no), 0) FROM listings WHERE firm_id = ?`, firmID).Scan(&no)
	return no, err
}

func (t importTx) Insert(ctx context.Context, l upstream.Listing, doc []byte) error {
	_, err := t.tx.ExecContext(ctx,
		`INSERT INTO listings (id, firm_id, no, firm_user_id, is_active, revision, document)
		 VALUES (?, ?, ?, ?, ?, ?, ?)`,
		l.ID, l.FirmID, l.No, l.FirmUserID, l.IsActive, l.Revision, string(doc))
	if ce := constraintError(err); ce != nil {
		return ce
	}
	return err
}

// Empty reports whether no firm is stored.
func (s *Store) Empty(ctx context.Context) (bool, error) {
	var empty bool
	if err := s.db.QueryRowContext(ctx, `SELECT NOT EXISTS (SELECT 1 FROM firms)`).Scan(&empty); err != nil {
		return false, fmt.Errorf("empty: %w", err)
	}
	return empty, nil
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	return s.db.PingContext(ctx)
}

// Close closes the database.
func (s *Store) Close() error {
	return s.db.Close()
}

func notFound(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return upstream.ErrNotFound
	}
	return err
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
