package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"math/bits"
	"strings"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

// Pool is an engine's pool of connections that also runs queries for
// several rows.
type Pool interface {
	DB
	RowsQuerier
}

// Engine is what an SQL engine supplies to a Store.
type Engine struct {
	// DB runs the writes, the reads of several rows, and begins the
	// transactions.
	DB Pool
	// Lookups runs the reads by id, number, key digest and e-mail. They are
	// safe to repeat, so an engine may run one again on a fresh connection
	// when its own died under it. Nil runs them on DB.
	Lookups RowQuerier
	// RowLock ends the read that an update's write follows, to lock the row
	// until the commit ("FOR UPDATE"). It is empty where every transaction
	// holds the write lock from BEGIN, as SQLite's IMMEDIATE ones do.
	RowLock string
	// ImportLock runs first in an import's transaction, so that two imports
	// never pick the same free id or number. It is empty where every
	// transaction holds the write lock from BEGIN.
	ImportLock string
	// ImportLookups and ImportWrites, where set, run before each batch's
	// lookups and before its writes: the engine's settings for each part.
	ImportLookups, ImportWrites string
	// PositionalImport writes an import's multi-row INSERTs with "?"
	// parameters: SQLite binds "$n" by looking each name up in a list, so a
	// statement's binding grows with the square of its parameters.
	PositionalImport bool
	// NowMillis is the engine's SQL expression of the database's clock in
	// milliseconds since 1970.
	NowMillis string
	// ConstraintError returns the domain error of a constraint violation,
	// upstream.ErrConflict for a unique key and upstream.ErrInvalid for a
	// foreign key, and nil for any other error.
	ConstraintError func(error) error
}

// Store is an upstream.Store but for Ping and Close, which the engine adds.
// Its methods are documented there.
type Store struct {
	e Engine
	// selectForUpdate reads, and locks, the listing that a write replaces,
	// with its entity tag where the stored one is current.
	selectForUpdate string
	// storeBody keeps a response body made by a read (see storeBodyQuery).
	storeBody string
	// byID and byNumber merge concurrent reads of responses into shared
	// queries.
	byID     *batcher[int64]
	byNumber *batcher[number]
	// idsQuery and numbersQuery read a batch whose IN list is 2^i long.
	idsQuery, numbersQuery [batchSizes]string
}

// number is a listing's number within its firm.
type number struct{ firmID, no int64 }

// batchSlots is how many queries of responses run at once before reads
// wait to share one; maxBatch is how many one query reads at most.
const (
	batchSlots = 4
	maxBatch   = 1 << (batchSizes - 1)
	batchSizes = 7
)

// New returns the Store of an engine. Its schema must be up to date: see
// Migrate.
func New(e Engine) *Store {
	if e.Lookups == nil {
		e.Lookups = e.DB
	}
	query := `SELECT ` + listingColumns + `, ` + currentTag + `
		FROM listings WHERE id = $1 AND firm_id = $2 AND NOT deleted`
	if e.RowLock != "" {
		query += " " + e.RowLock
	}
	s := &Store{e: e, selectForUpdate: query, storeBody: storeBodyQuery(e.NowMillis)}
	for i := range batchSizes {
		s.idsQuery[i] = `SELECT ` + encodedColumns + ` FROM listings WHERE id IN (` + placeholders(1<<i, 1) + `) AND NOT deleted`
		s.numbersQuery[i] = `SELECT ` + encodedColumns + ` FROM listings WHERE (firm_id, no) IN (` + placeholders(1<<i, 2) + `) AND NOT deleted`
	}
	s.byID = &batcher[int64]{slots: batchSlots, maxKeys: maxBatch, one: s.encodedByID, many: s.encodedByIDs}
	s.byNumber = &batcher[number]{slots: batchSlots, maxKeys: maxBatch, one: s.encodedByNumber, many: s.encodedByNumbers}
	return s
}

func (s *Store) ListingByID(ctx context.Context, id int64) (upstream.Listing, error) {
	l, err := scanListing(s.e.Lookups.QueryRow(ctx,
		`SELECT `+listingColumns+` FROM listings WHERE id = $1 AND NOT deleted`, id))
	if err != nil {
		return upstream.Listing{}, fmt.Errorf("listing %d: %w", id, err)
	}
	return l, nil
}

func (s *Store) ListingByNumber(ctx context.Context, firmID, no int64) (upstream.Listing, error) {
	l, err := scanListing(s.e.Lookups.QueryRow(ctx,
		`SELECT `+listingColumns+` FROM listings WHERE firm_id = $1 AND no = $2 AND NOT deleted`, firmID, no))
	if err != nil {
		return upstream.Listing{}, fmt.Errorf("listing %s: %w", upstream.ListingNumber(firmID, no), err)
	}
	return l, nil
}

func (s *Store) EncodedByID(ctx context.Context, id int64) (upstream.Encoded, error) {
	e, err := s.byID.get(ctx, id)
	if err != nil {
		return upstream.Encoded{}, fmt.Errorf("listing %d: %w", id, err)
	}
	return e, nil
}

func (s *Store) EncodedByNumber(ctx context.Context, firmID, no int64) (upstream.Encoded, error) {
	e, err := s.byNumber.get(ctx, number{firmID, no})
	if err != nil {
		return upstream.Encoded{}, fmt.Errorf("listing %s: %w", upstream.ListingNumber(firmID, no), err)
	}
	return e, nil
}

// encodedColumns are what a read of a response selects: the stored body
// and tag where they were made from this revision, else the document,
// which is the body where currentTag says so (schema step 9) and otherwise
// what to make them from.
const encodedColumns = `id, firm_id, no, firm_user_id, is_active, revision,
	CASE WHEN body_revision = revision THEN body END,
	` + currentTag + `,
	CASE WHEN body_revision = revision THEN NULL ELSE document END,
	` + currentModified

// currentModified selects the row's modified_at where its response was
// made from this revision, as currentTag does its tag: a revision that
// another writer made since has no time yet, until a read makes its body.
const currentModified = `CASE WHEN body_revision = revision OR document_body_revision = revision THEN modified_at END`

// currentTag selects the tag of the row's response where it was made from
// this revision: with body (step 6), or for the document itself (step 9).
const currentTag = `CASE WHEN body_revision = revision OR document_body_revision = revision THEN etag END`

func (s *Store) encodedByID(ctx context.Context, id int64) (upstream.Encoded, error) {
	r, err := scanEncoded(s.e.Lookups.QueryRow(ctx, `SELECT `+encodedColumns+` FROM listings WHERE id = $1 AND NOT deleted`, id))
	if err != nil {
		return upstream.Encoded{}, notFound(err)
	}
	return s.encode(ctx, r)
}

func (s *Store) encodedByNumber(ctx context.Context, k number) (upstream.Encoded, error) {
	r, err := scanEncoded(s.e.Lookups.QueryRow(ctx,
		`SELECT `+encodedColumns+` FROM listings WHERE firm_id = $1 AND no = $2 AND NOT deleted`, k.firmID, k.no))
	if err != nil {
		return upstream.Encoded{}, notFound(err)
	}
	return s.encode(ctx, r)
}

// encodedByIDs reads the responses of several listings in one query.
func (s *Store) encodedByIDs(ctx context.Context, ids []int64) (map[int64]answer, error) {
	size := listSize(len(ids))
	n := 1 << size
	args := make([]any, n)
	for i := range n {
		args[i] = ids[min(i, len(ids)-1)] // the list is padded with repeats
	}
	found := make(map[int64]answer, len(ids))
	err := s.encodedRows(ctx, s.idsQuery[size], args,
		func(c columns, a answer) { found[c.id] = a })
	return found, err
}

// encodedByNumbers reads the responses of several listings, by number, in
// one query.
func (s *Store) encodedByNumbers(ctx context.Context, ks []number) (map[number]answer, error) {
	size := listSize(len(ks))
	n := 1 << size
	args := make([]any, 0, 2*n)
	for i := range n {
		k := ks[min(i, len(ks)-1)]
		args = append(args, k.firmID, k.no)
	}
	found := make(map[number]answer, len(ks))
	err := s.encodedRows(ctx, s.numbersQuery[size], args,
		func(c columns, a answer) { found[number{c.firmID, c.no}] = a })
	return found, err
}

// encodedRows reads every row of query, then puts each row's response, or
// the error of a row whose document does not decode. It encodes rows
// without a current body once the rows are closed, as that may store the
// body.
func (s *Store) encodedRows(ctx context.Context, query string, args []any, put func(columns, answer)) error {
	rows, err := s.e.DB.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	var rs []encodedRow
	for rows.Next() {
		r, err := scanEncoded(rows)
		if err != nil {
			rows.Close()
			return err
		}
		rs = append(rs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, r := range rs {
		e, err := s.encode(ctx, r)
		put(r.c, answer{e, err})
	}
	return nil
}

// listSize is i where 2^i is the length of the IN list that holds n keys:
// a power of two, so that each engine prepares a handful of statements,
// not one per length.
func listSize(n int) int {
	return bits.Len(uint(n - 1))
}

// placeholders returns n items of width parameters each, numbered from $1:
// "$1, $2" or "($1, $2), ($3, $4)".
func placeholders(n, width int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		if width > 1 {
			b.WriteByte('(')
		}
		for j := range width {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "$%d", i*width+j+1)
		}
		if width > 1 {
			b.WriteByte(')')
		}
	}
	return b.String()
}

// encodedRow is a row of encodedColumns.
type encodedRow struct {
	c         columns
	body, doc []byte
	etag      *string
	modified  *int64
}

func scanEncoded(row Row) (encodedRow, error) {
	var r encodedRow
	err := row.Scan(&r.c.id, &r.c.firmID, &r.c.no, &r.c.firmUserID, &r.c.active, &r.c.revision, &r.body, &r.etag, &r.doc, &r.modified)
	return r, err
}

// encode returns a row's response. A row without a current body (an
// import before bodies were kept, a write by another writer) is encoded
// from its document and columns, and the body stored for the next read,
// under the revision it was made from: the statement names no column that
// the change feed's triggers watch, so it records no change.
func (s *Store) encode(ctx context.Context, r encodedRow) (upstream.Encoded, error) {
	if body := keptBody(r.body, r.doc, r.etag); body != nil {
		return upstream.Encoded{ID: r.c.id, FirmID: r.c.firmID, No: r.c.no, Revision: r.c.revision, Active: r.c.active,
			Body: body, ETag: []byte(*r.etag), Modified: deref(r.modified)}, nil
	}
	l, err := r.c.listing(r.doc)
	if err != nil {
		return upstream.Encoded{}, err
	}
	e, err := upstream.Encode(l)
	if err != nil {
		return upstream.Encoded{}, err
	}
	// Best effort: a failure costs the next read the same work, and this
	// answer its Last-Modified.
	e.Modified, _ = keepBody(ctx, s.e.DB, s.storeBody, e)
	return e, nil
}

// keepBody stores e's body with its row, under the revision it was made
// from, and returns the time it gives that revision (see nextModified);
// 0 where the row changed since.
func keepBody(ctx context.Context, db RowQuerier, storeBody string, e upstream.Encoded) (int64, error) {
	var modified int64
	err := db.QueryRow(ctx, storeBody, e.Body, string(e.ETag), e.Revision, e.ID).Scan(&modified)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return modified, err
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// keptBody returns the response body kept for the row's revision, as
// selected with currentTag: body, or else the document, which is the body
// where the tag is current and body is not (step 9). Nil: none was kept.
func keptBody(body, doc []byte, tag *string) []byte {
	switch {
	case tag == nil:
		return nil
	case body != nil:
		return body
	default:
		return doc
	}
}

// storeBodyQuery keeps a listing's response body with it, made from
// revision $3, unless the row has changed since, and records that
// revision's time, which it returns.
func storeBodyQuery(now string) string {
	return `UPDATE listings SET body = $1, etag = $2, body_revision = $3, modified_at = ` + nextModified(now) + `
		WHERE id = $4 AND revision = $3 RETURNING modified_at`
}

// nextModified is the SQL of a new revision's modified_at, its
// Last-Modified: two seconds behind now (the database's clock, so that
// every gateway and writer reads one clock), but at least the second
// after the row's previous one. Dates in HTTP have whole seconds; so no
// two revisions of a listing share one, and a client that holds an older
// revision never sends an If-Modified-Since that the current one is not
// modified since. Two seconds behind, the first two revisions within any
// second have dates that an answer's Date, which lags the clock by up to
// a second, has passed: the gateway sends them at once. A later one runs
// ahead, and the gateway sends no Last-Modified for it until the Date
// reaches it (RFC 9110 §8.8.2.1). An insert's default is as far behind
// (PostgreSQL step 13, SQLite step 12).
func nextModified(now string) string {
	behind := `(` + now + ` - 2000)`
	next := `((modified_at / 1000 + 1) * 1000)`
	return `(CASE WHEN ` + behind + ` > ` + next + ` THEN ` + behind + ` ELSE ` + next + ` END)`
}

// encodeStored returns the body that a read of l, stored with doc as its
// document, answers.
func encodeStored(l upstream.Listing, doc []byte) (upstream.Encoded, error) {
	c := columns{id: l.ID, firmID: l.FirmID, no: l.No, firmUserID: l.FirmUserID, active: l.IsActive, revision: l.Revision}
	read, err := c.listing(doc)
	if err != nil {
		return upstream.Encoded{}, err
	}
	return upstream.Encode(read)
}

// listingColumns are what a read of a listing selects: the columns that
// are searched and checked, and the document with the rest.
const listingColumns = `id, firm_id, no, firm_user_id, is_active, revision, document, modified_at`

// scanListing reads a row of listingColumns. The columns win over the
// document: a writer other than the gateway may change one (an operator's
// "UPDATE listings SET is_active = false") without the other. The revision
// has a column of its own, so that a write can raise it without decoding
// the document.
func scanListing(row Row) (upstream.Listing, error) {
	var (
		c   columns
		doc []byte
	)
	if err := row.Scan(&c.id, &c.firmID, &c.no, &c.firmUserID, &c.active, &c.revision, &doc, &c.modified); err != nil {
		return upstream.Listing{}, notFound(err)
	}
	return c.listing(doc)
}

// UpdateListing reads and writes in one transaction, which the engine's
// RowLock (or its write lock from BEGIN) keeps from interleaving with
// another update of the listing: of two at once, the second replaces what
// the first wrote, and each raises the revision. The precondition is
// evaluated against the locked row, so that of two writes that expect the
// same version, the second finds the first's and fails.
func (s *Store) UpdateListing(ctx context.Context, l upstream.Listing, cond upstream.Precondition) (upstream.Listing, error) {
	var next upstream.Listing
	err := inTx(ctx, s.e.DB, func(tx Querier) error {
		stored, err := s.lockListing(ctx, tx, l.FirmID, l.ID, cond)
		if err != nil {
			return err
		}
		if next, err = stored.Replaced(l, time.Now().UnixMilli()); err != nil {
			return err
		}
		doc, err := json.Marshal(next)
		if err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		e, err := encodeStored(next, doc)
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, `UPDATE listings SET is_active = $1, revision = $2, document = $3,
			body = $4, etag = $5, body_revision = $2, modified_at = `+nextModified(s.e.NowMillis)+` WHERE id = $6
			RETURNING modified_at`,
			next.IsActive, next.Revision, string(doc), e.Body, string(e.ETag), next.ID).Scan(&next.Modified)
	})
	if err != nil {
		return upstream.Listing{}, fmt.Errorf("update listing %d of firm %d: %w", l.ID, l.FirmID, err)
	}
	return next, nil
}

// DeleteListing is one statement, so that it needs no transaction: of two
// deletes at once, the second finds the row deleted. A conditional delete
// locks the row and evaluates its precondition first, in one transaction.
func (s *Store) DeleteListing(ctx context.Context, firmID, id int64, cond upstream.Precondition) (upstream.Listing, error) {
	const del = `UPDATE listings SET deleted = TRUE, revision = revision + 1
		 WHERE id = $1 AND firm_id = $2 AND NOT deleted
		 RETURNING ` + listingColumns
	var l upstream.Listing
	var err error
	if !cond.Required() {
		l, err = scanListing(s.e.DB.QueryRow(ctx, del, id, firmID))
	} else {
		err = inTx(ctx, s.e.DB, func(tx Querier) error {
			if _, err := s.lockListing(ctx, tx, firmID, id, cond); err != nil {
				return err
			}
			l, err = scanListing(tx.QueryRow(ctx, del, id, firmID))
			return err
		})
	}
	if err != nil {
		return upstream.Listing{}, fmt.Errorf("delete listing %d of firm %d: %w", id, firmID, err)
	}
	return l, nil
}

// lockListing reads the listing a write replaces, locking it until the
// transaction ends, and evaluates the write's precondition against it:
// upstream.ErrPreconditionFailed where it does not hold.
func (s *Store) lockListing(ctx context.Context, tx Querier, firmID, id int64, cond upstream.Precondition) (upstream.Listing, error) {
	var (
		c   columns
		doc []byte
		tag *string
	)
	err := tx.QueryRow(ctx, s.selectForUpdate, id, firmID).
		Scan(&c.id, &c.firmID, &c.no, &c.firmUserID, &c.active, &c.revision, &doc, &c.modified, &tag)
	if err != nil {
		return upstream.Listing{}, notFound(err)
	}
	stored, err := c.listing(doc)
	if err != nil || !cond.Required() {
		return stored, err
	}
	var etag []byte
	modified := stored.Modified
	if tag != nil {
		etag = []byte(*tag)
	} else { // written by another writer since its body was made
		e, err := upstream.Encode(stored)
		if err != nil {
			return upstream.Listing{}, err
		}
		// and since its last recorded time: its own comes later than any
		// date a client holds.
		etag, modified = e.ETag, math.MaxInt64
	}
	if !cond.Holds(etag, modified) {
		return upstream.Listing{}, upstream.ErrPreconditionFailed
	}
	return stored, nil
}

func (s *Store) FirmByKeyDigest(ctx context.Context, digest []byte) (upstream.Firm, error) {
	var f upstream.Firm
	err := s.e.Lookups.QueryRow(ctx, `SELECT id, name FROM firms WHERE key_digest = $1`, digest).
		Scan(&f.ID, &f.Name)
	if err != nil {
		return upstream.Firm{}, fmt.Errorf("firm by key digest: %w", notFound(err))
	}
	return f, nil
}

func (s *Store) UserByEmail(ctx context.Context, firmID int64, email string) (upstream.User, error) {
	var u upstream.User
	err := s.e.Lookups.QueryRow(ctx,
		`SELECT id, firm_id, email, password_hash FROM firm_users WHERE firm_id = $1 AND email = $2 AND NOT disabled`,
		firmID, upstream.NormalizeEmail(email)).
		Scan(&u.ID, &u.FirmID, &u.Email, &u.PasswordHash)
	if err != nil {
		return upstream.User{}, fmt.Errorf("user of firm %d: %w", firmID, notFound(err))
	}
	return u, nil
}

// AddFirm refuses a blank name or an empty digest itself: the schema would
// store either.
func (s *Store) AddFirm(ctx context.Context, name string, keyDigest []byte) (upstream.Firm, error) {
	if strings.TrimSpace(name) == "" || len(keyDigest) == 0 {
		return upstream.Firm{}, fmt.Errorf("firm needs a name and a key digest: %w", upstream.ErrInvalid)
	}
	f := upstream.Firm{Name: name}
	err := s.e.DB.QueryRow(ctx,
		`INSERT INTO firms (name, key_digest) VALUES ($1, $2) RETURNING id`, name, keyDigest).
		Scan(&f.ID)
	if err != nil {
		if ce := s.e.ConstraintError(err); ce != nil {
			return upstream.Firm{}, fmt.Errorf("add firm %q: key digest taken: %w", name, ce)
		}
		return upstream.Firm{}, fmt.Errorf("add firm %q: %w", name, err)
	}
	return f, nil
}

// AddUser stores the e-mail normalized, so that the unique key of firm and
// e-mail holds whatever case or spaces a request gives.
func (s *Store) AddUser(ctx context.Context, u upstream.User) (upstream.User, error) {
	u.Email = upstream.NormalizeEmail(u.Email)
	if u.Email == "" {
		return upstream.User{}, fmt.Errorf("user of firm %d needs an e-mail: %w", u.FirmID, upstream.ErrInvalid)
	}
	err := s.e.DB.QueryRow(ctx,
		`INSERT INTO firm_users (firm_id, email, password_hash) VALUES ($1, $2, $3) RETURNING id`,
		u.FirmID, u.Email, u.PasswordHash).
		Scan(&u.ID)
	if err != nil {
		switch ce := s.e.ConstraintError(err); {
		case errors.Is(ce, upstream.ErrConflict):
			return upstream.User{}, fmt.Errorf("add user of firm %d: e-mail taken: %w", u.FirmID, ce)
		case errors.Is(ce, upstream.ErrInvalid):
			return upstream.User{}, fmt.Errorf("add user: unknown firm %d: %w", u.FirmID, ce)
		}
		return upstream.User{}, fmt.Errorf("add user of firm %d: %w", u.FirmID, err)
	}
	return u, nil
}

// RotateFirmKey is one statement: of two rotations at once, the later one's
// digest stays.
func (s *Store) RotateFirmKey(ctx context.Context, firmID int64, keyDigest []byte) (upstream.Firm, error) {
	if len(keyDigest) == 0 {
		return upstream.Firm{}, fmt.Errorf("rotate key of firm %d: no key digest: %w", firmID, upstream.ErrInvalid)
	}
	var f upstream.Firm
	err := s.e.DB.QueryRow(ctx,
		`UPDATE firms SET key_digest = $1 WHERE id = $2 RETURNING id, name`, keyDigest, firmID).
		Scan(&f.ID, &f.Name)
	if err != nil {
		if ce := s.e.ConstraintError(err); ce != nil {
			return upstream.Firm{}, fmt.Errorf("rotate key of firm %d: key digest taken: %w", firmID, ce)
		}
		return upstream.Firm{}, fmt.Errorf("rotate key of firm %d: %w", firmID, notFound(err))
	}
	return f, nil
}

// DisableUser is one statement and idempotent: it sets the flag whatever
// it was.
func (s *Store) DisableUser(ctx context.Context, firmID int64, email string) (upstream.User, error) {
	var u upstream.User
	err := s.e.DB.QueryRow(ctx,
		`UPDATE firm_users SET disabled = TRUE WHERE firm_id = $1 AND email = $2
		 RETURNING id, firm_id, email, password_hash`,
		firmID, upstream.NormalizeEmail(email)).
		Scan(&u.ID, &u.FirmID, &u.Email, &u.PasswordHash)
	if err != nil {
		return upstream.User{}, fmt.Errorf("disable user of firm %d: %w", firmID, notFound(err))
	}
	return u, nil
}

// EnableUser is one statement and idempotent, as DisableUser is.
func (s *Store) EnableUser(ctx context.Context, firmID int64, email string) (upstream.User, error) {
	var u upstream.User
	err := s.e.DB.QueryRow(ctx,
		`UPDATE firm_users SET disabled = FALSE WHERE firm_id = $1 AND email = $2
		 RETURNING id, firm_id, email, password_hash`,
		firmID, upstream.NormalizeEmail(email)).
		Scan(&u.ID, &u.FirmID, &u.Email, &u.PasswordHash)
	if err != nil {
		return upstream.User{}, fmt.Errorf("enable user of firm %d: %w", firmID, notFound(err))
	}
	return u, nil
}

// RevokeTokens is one statement: the user is resolved, the firm checked
// and the row written or raised together, so that two revocations at once
// keep the later time. No row written means no such firm or user.
func (s *Store) RevokeTokens(ctx context.Context, firmID int64, email string, at time.Time) (upstream.Revocation, error) {
	r := upstream.Revocation{FirmID: firmID}
	var ms int64
	err := s.e.DB.QueryRow(ctx,
		`INSERT INTO token_revocations (firm_id, firm_user_id, revoked_at)
		 SELECT f.id, COALESCE(u.id, 0), CAST($3 AS BIGINT)
		 FROM firms f LEFT JOIN firm_users u ON u.firm_id = f.id AND u.email = $2
		 WHERE f.id = $1 AND ($2 = '' OR u.id IS NOT NULL)
		 ON CONFLICT (firm_id, firm_user_id) DO UPDATE SET revoked_at =
		   CASE WHEN excluded.revoked_at > token_revocations.revoked_at
		        THEN excluded.revoked_at ELSE token_revocations.revoked_at END
		 RETURNING firm_user_id, revoked_at`,
		firmID, upstream.NormalizeEmail(email), at.UnixMilli()).
		Scan(&r.UserID, &ms)
	if err != nil {
		return upstream.Revocation{}, fmt.Errorf("revoke tokens of firm %d: %w", firmID, notFound(err))
	}
	r.At = time.UnixMilli(ms)
	return r, nil
}

func (s *Store) Revocations(ctx context.Context, since time.Time) ([]upstream.Revocation, error) {
	rows, err := s.e.DB.Query(ctx,
		`SELECT firm_id, firm_user_id, revoked_at FROM token_revocations WHERE revoked_at > $1`, since.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("revocations: %w", err)
	}
	defer rows.Close()
	var out []upstream.Revocation
	for rows.Next() {
		var (
			r  upstream.Revocation
			ms int64
		)
		if err := rows.Scan(&r.FirmID, &r.UserID, &ms); err != nil {
			return nil, fmt.Errorf("revocations: %w", err)
		}
		r.At = time.UnixMilli(ms)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("revocations: %w", err)
	}
	return out, nil
}

// PruneRevocations counts the rows its DELETE returns: neither engine's
// Exec result is reachable through Querier.
func (s *Store) PruneRevocations(ctx context.Context, before time.Time) (int64, error) {
	rows, err := s.e.DB.Query(ctx, `DELETE FROM token_revocations WHERE revoked_at < $1 RETURNING firm_id`, before.UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("prune revocations: %w", err)
	}
	defer rows.Close()
	var n int64
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("prune revocations: %w", err)
	}
	return n, nil
}

// ImportListings is ImportStream over ls, returning the stored listings.
func (s *Store) ImportListings(ctx context.Context, ls []upstream.Listing) ([]upstream.Listing, error) {
	if len(ls) == 0 {
		return []upstream.Listing{}, nil
	}
	out := make([]upstream.Listing, 0, len(ls))
	_, err := s.ImportStream(ctx, func(yield func(upstream.Listing, error) bool) {
		for _, l := range ls {
			if !yield(l, nil) {
				return
			}
		}
	}, func(stored []upstream.Listing) error {
		out = append(out, stored...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, s.readModified(ctx, out)
}

// readModified gives a few stored listings the time their insert recorded
// (the column's default, or SQLite's trigger), so that the writer's own
// cache entry of a create carries its Last-Modified. A bulk import leaves
// it to the reads.
func (s *Store) readModified(ctx context.Context, ls []upstream.Listing) error {
	if len(ls) > maxBatch {
		return nil
	}
	ids := make([]any, len(ls))
	at := make(map[int64]int, len(ls))
	for i, l := range ls {
		ids[i], at[l.ID] = l.ID, i
	}
	rows, err := s.e.DB.Query(ctx, `SELECT id, modified_at FROM listings WHERE id IN (`+placeholders(len(ls), 1)+`)`, ids...)
	if err != nil {
		return fmt.Errorf("read modified_at: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, modified int64
		if err := rows.Scan(&id, &modified); err != nil {
			return fmt.Errorf("read modified_at: %w", err)
		}
		ls[at[id]].Modified = modified
	}
	return rows.Err()
}

// ImportStream runs in one transaction, so that a rejected entry leaves
// none of the file stored, under the engine's ImportLock (or its write lock
// from BEGIN), so that two imports do not pick the same free id or number.
// It reads next a batch at a time and calls stored, when set, with each
// batch as written, before the commit.
func (s *Store) ImportStream(ctx context.Context, next iter.Seq2[upstream.Listing, error], stored func([]upstream.Listing) error) (int, error) {
	var n int
	err := inTx(ctx, s.e.DB, func(tx Querier) (err error) {
		itx, ok := tx.(ImportTx)
		if !ok {
			return errors.New("the engine's transaction reads no rows")
		}
		if s.e.ImportLock != "" {
			if err := tx.Exec(ctx, s.e.ImportLock); err != nil {
				return err
			}
		}
		im := &importer{
			tx: itx, constraintError: s.e.ConstraintError, insertQuery: insertStatement(insertChunk, s.e.PositionalImport), positional: s.e.PositionalImport,
			lookupsSetting: s.e.ImportLookups, writesSetting: s.e.ImportWrites,
			now: time.Now().UnixMilli(), firms: map[int64]*firm{}, users: map[int64]int64{},
		}
		n, err = importStream(ctx, im, next, stored)
		return err
	})
	var (
		ie *upstream.ImportError
		in *inputErr
	)
	switch {
	case errors.As(err, &in):
		return 0, in.err
	case errors.As(err, &ie):
		return 0, err // names the entry at fault; commands print it as it is
	case err != nil:
		return 0, fmt.Errorf("import: %w", err)
	}
	return n, nil
}

func (s *Store) Empty(ctx context.Context) (bool, error) {
	var empty bool
	if err := s.e.DB.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM firms)`).Scan(&empty); err != nil {
		return false, fmt.Errorf("empty: %w", err)
	}
	return empty, nil
}

// notFound turns the driver's no-rows error into the domain's, so that it
// does not leak past the store.
func notFound(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return upstream.ErrNotFound
	}
	return err
}
