// Package sqlite is the upstream.Store on an SQLite file, through the pure-Go
// driver modernc.org/sqlite. It owns its schema (schema.sql, embedded and
// applied at Open) and translates the driver's errors into the domain errors
// of package upstream.
//
// Concurrency: a Store is safe for concurrent use. The file is in WAL mode,
// so reads run alongside a write; every transaction takes the write lock at
// BEGIN (IMMEDIATE), and writers wait for each other up to the busy timeout.
package sqlite

import (
	"context"
	"database/sql"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/realty-gateway/gateway/upstream"
)

//go:embed schema.sql
var schema string

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
// when missing, and applies the schema.
func Open(ctx context.Context, path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create directory of %s: %w", path, err)
	}
	db, err := sql.Open("sqlite", path+"?"+dsnParams)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	s := &Store{db: db}
	if err := s.migrate(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("migrate %s: %w", path, err), db.Close())
	}
	return s, nil
}

func (s *Store) migrate(ctx context.Context) (err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { err = rollback(tx, err) }()
	if _, err := tx.ExecContext(ctx, schema); err != nil {
		return err
	}
	return tx.Commit()
}

// rollback ends tx when err is set, adding the rollback's own failure.
func rollback(tx *sql.Tx, err error) error {
	if rbErr := tx.Rollback(); err != nil && rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
		return errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
	}
	return err
}

// ListingByID returns the listing with this id.
func (s *Store) ListingByID(ctx context.Context, id int64) (upstream.Listing, error) {
	row := s.db.QueryRowContext(ctx, `SELECT revision, document FROM listings WHERE id = ?`, id)
	l, err := scanListing(row)
	if err != nil {
		return upstream.Listing{}, fmt.Errorf("listing %d: %w", id, err)
	}
	return l, nil
}

// ListingByNumber returns the listing with this firm and number.
func (s *Store) ListingByNumber(ctx context.Context, firmID, no int64) (upstream.Listing, error) {
	row := s.db.QueryRowContext(ctx,
		`SELECT revision, document FROM listings WHERE firm_id = ? AND no = ?`, firmID, no)
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

// ImportListings stores the listings in one transaction: all or none.
func (s *Store) ImportListings(ctx context.Context, ls []upstream.Listing) (_ []upstream.Listing, err error) {
	if len(ls) == 0 {
		return []upstream.Listing{}, nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	defer func() { err = rollback(tx, err) }()

	im := importer{
		tx:    tx,
		now:   time.Now().UnixMilli(),
		nos:   map[int64]*counter{},
		firms: map[int64]bool{},
		users: map[int64]int64{},
		seen:  map[[2]int64]bool{},
	}
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM listings`).Scan(&im.ids.stored); err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	im.ids.max = im.ids.stored

	out := make([]upstream.Listing, len(ls))
	for i, l := range ls {
		if out[i], err = im.add(ctx, l); err != nil {
			var de *domainErr
			if errors.As(err, &de) {
				return nil, &upstream.ImportError{Index: i, ID: l.ID, Err: de.err}
			}
			return nil, fmt.Errorf("import entry %d: %w", i, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("import: commit: %w", err)
	}
	return out, nil
}

// counter tracks the largest id (or no) before the import and so far.
type counter struct {
	stored, max int64
}

// importer holds what one import learned so far, under its write lock.
type importer struct {
	tx    *sql.Tx
	now   int64
	ids   counter
	nos   map[int64]*counter // by firm
	firms map[int64]bool     // firm id: exists
	users map[int64]int64    // user id: its firm id, 0 when unknown
	seen  map[[2]int64]bool  // {0, id} and {firm id, no} taken in this file
}

// domainErr marks an entry's fault, as opposed to a failure of the store.
type domainErr struct{ err error }

func (e *domainErr) Error() string { return e.err.Error() }

func reject(format string, args ...any) error {
	return &domainErr{err: fmt.Errorf(format, args...)}
}

func (im *importer) add(ctx context.Context, l upstream.Listing) (upstream.Listing, error) {
	if l.ID < 0 || l.No < 0 {
		return l, reject("negative id or no: %w", upstream.ErrInvalid)
	}
	if err := im.checkOwner(ctx, l.FirmID, l.FirmUserID); err != nil {
		return l, err
	}

	id, ok, err := im.take(ctx, &im.ids, 0, l.ID, `SELECT EXISTS (SELECT 1 FROM listings WHERE id = ?)`, l.ID)
	if err != nil {
		return l, err
	}
	if !ok {
		return l, reject("id %d taken: %w", l.ID, upstream.ErrConflict)
	}
	nos, err := im.firmNos(ctx, l.FirmID)
	if err != nil {
		return l, err
	}
	no, ok, err := im.take(ctx, nos, l.FirmID, l.No,
		`SELECT EXISTS (SELECT 1 FROM listings WHERE firm_id = ? AND no = ?)`, l.FirmID, l.No)
	if err != nil {
		return l, err
	}
	if !ok {
		return l, reject("listing %s taken: %w", upstream.ListingNumber(l.FirmID, l.No), upstream.ErrConflict)
	}
	l.ID, l.No = id, no

	if l.CreatedDate == 0 {
		l.CreatedDate = im.now
	}
	if l.UpdatedDate == 0 {
		l.UpdatedDate = l.CreatedDate
	}
	l.Revision = 1
	l.Normalize()
	doc, err := json.Marshal(l)
	if err != nil {
		return l, fmt.Errorf("encode: %w", err)
	}
	_, err = im.tx.ExecContext(ctx,
		`INSERT INTO listings (id, firm_id, no, firm_user_id, is_active, revision, document)
		 VALUES (?, ?, ?, ?, ?, ?, ?)`,
		l.ID, l.FirmID, l.No, l.FirmUserID, l.IsActive, l.Revision, string(doc))
	if err != nil {
		if ce := constraintError(err); ce != nil {
			return l, reject("listing %d or %s: %w", l.ID, l.ListingID, ce)
		}
		return l, err
	}
	return l, nil
}

// checkOwner rejects a listing whose firm is unknown or whose user is not
// one of that firm's.
func (im *importer) checkOwner(ctx context.Context, firmID, userID int64) error {
	exists, ok := im.firms[firmID]
	if !ok {
		err := im.tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM firms WHERE id = ?)`, firmID).Scan(&exists)
		if err != nil {
			return err
		}
		im.firms[firmID] = exists
	}
	if !exists {
		return reject("unknown firm %d: %w", firmID, upstream.ErrInvalid)
	}

	owner, ok := im.users[userID]
	if !ok {
		err := im.tx.QueryRowContext(ctx, `SELECT firm_id FROM firm_users WHERE id = ?`, userID).Scan(&owner)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		im.users[userID] = owner
	}
	if owner != firmID {
		return reject("firm %d has no user %d: %w", firmID, userID, upstream.ErrInvalid)
	}
	return nil
}

func (im *importer) firmNos(ctx context.Context, firmID int64) (*counter, error) {
	if c, ok := im.nos[firmID]; ok {
		return c, nil
	}
	c := &counter{}
	err := im.tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(no), 0) FROM listings WHERE firm_id = ?`, firmID).
		Scan(&c.stored)
	if err != nil {
		return nil, err
	}
	c.max = c.stored
	im.nos[firmID] = c
	return c, nil
}

// take claims give, or the next free value of c when give is zero. It
// reports false when give is taken in this file or, as query tells, in the
// store. scope is 0 for ids and the firm id for numbers.
func (im *importer) take(ctx context.Context, c *counter, scope, give int64, query string, args ...any) (int64, bool, error) {
	if give == 0 {
		give = c.max + 1
	} else {
		if im.seen[[2]int64{scope, give}] {
			return 0, false, nil
		}
		if give <= c.stored {
			var taken bool
			if err := im.tx.QueryRowContext(ctx, query, args...).Scan(&taken); err != nil {
				return 0, false, err
			}
			if taken {
				return 0, false, nil
			}
		}
	}
	im.seen[[2]int64{scope, give}] = true
	c.max = max(c.max, give)
	return give, true, nil
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
