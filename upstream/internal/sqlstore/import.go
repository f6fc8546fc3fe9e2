package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/realty-gateway/gateway/upstream"
)

// importListings stores ls through tx as new listings written at now
// (epoch ms), and returns them as stored. It keeps the given ids and
// numbers, which must be within [1, upstream.MaxNumber], and assigns those
// that are zero: an id above the largest so far, a number from the firm's
// counter (firms.next_no), the first one from there up that no listing of
// the firm has, starting again from 1 past upstream.MaxNumber. An entry at
// fault is an *upstream.ImportError: a value out of range, no id left after
// upstream.MaxNumber, or no number left in the firm, is a
// *upstream.ValidationError for field "id" or "no". On any error the caller
// rolls tx back.
func importListings(ctx context.Context, tx importTx, ls []upstream.Listing, now int64) ([]upstream.Listing, error) {
	im := importer{
		tx:    tx,
		now:   now,
		firms: map[int64]bool{},
		users: map[int64]int64{},
		seen:  map[[2]int64]bool{},
	}
	maxID, err := tx.maxID(ctx)
	if err != nil {
		return nil, fmt.Errorf("largest id: %w", err)
	}
	im.ids = counter{stored: maxID, max: maxID}

	out := make([]upstream.Listing, len(ls))
	for i, l := range ls {
		if out[i], err = im.add(ctx, l); err != nil {
			var de *domainErr
			if errors.As(err, &de) {
				return nil, &upstream.ImportError{Index: i, ID: l.ID, Err: de.err}
			}
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
	}
	return out, nil
}

// counter tracks the largest id before the import and so far.
type counter struct {
	stored, max int64
}

// importer holds what one import learned so far, within its transaction.
type importer struct {
	tx    importTx
	now   int64
	ids   counter
	firms map[int64]bool    // firm id: exists
	users map[int64]int64   // user id: its firm id, 0 when unknown
	seen  map[[2]int64]bool // {0, id} and {firm id, no} taken in this file
}

// domainErr marks an entry's fault, as opposed to a failure of the store.
type domainErr struct{ err error }

func (e *domainErr) Error() string { return e.err.Error() }

func reject(format string, args ...any) error {
	return &domainErr{err: fmt.Errorf(format, args...)}
}

func (im *importer) add(ctx context.Context, l upstream.Listing) (upstream.Listing, error) {
	if err := upstream.CheckNumber("id", l.ID); err != nil {
		return l, reject("id %d: %w", l.ID, err)
	}
	if err := upstream.CheckNumber("no", l.No); err != nil {
		return l, reject("no %d: %w", l.No, err)
	}
	if err := im.checkOwner(ctx, l.FirmID, l.FirmUserID); err != nil {
		return l, err
	}

	id, ok, err := im.take(&im.ids, 0, l.ID, func() (bool, error) {
		return im.tx.idTaken(ctx, l.ID)
	})
	switch {
	case errors.Is(err, errExhausted):
		return l, reject("next id: %w", upstream.Invalid("id",
			fmt.Sprintf("has no free value: listing ids reach the largest allowed, %d", int64(upstream.MaxNumber))))
	case err != nil:
		return l, err
	case !ok:
		return l, reject("id %d taken: %w", l.ID, upstream.ErrConflict)
	}
	no, ok, err := im.number(ctx, l.FirmID, l.No)
	switch {
	case errors.Is(err, errExhausted):
		return l, reject("next number of firm %d: %w", l.FirmID, upstream.Invalid("no",
			fmt.Sprintf("has no free value: every listing number of the firm up to the largest allowed, %d, is in use; give an unused one",
				int64(upstream.MaxNumber))))
	case err != nil:
		return l, err
	case !ok:
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
	if err := im.tx.insert(ctx, l, doc); err != nil {
		if errors.Is(err, upstream.ErrConflict) || errors.Is(err, upstream.ErrInvalid) {
			return l, reject("listing %d or %s: %w", l.ID, l.ListingID, err)
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
		var err error
		if exists, err = im.tx.firmExists(ctx, firmID); err != nil {
			return err
		}
		im.firms[firmID] = exists
	}
	if !exists {
		return reject("unknown firm %d: %w", firmID, upstream.ErrInvalid)
	}

	owner, ok := im.users[userID]
	if !ok {
		var err error
		if owner, err = im.tx.userFirm(ctx, userID); err != nil {
			return err
		}
		im.users[userID] = owner
	}
	if owner != firmID {
		return reject("firm %d has no user %d: %w", firmID, userID, upstream.ErrInvalid)
	}
	return nil
}

// number claims give as the firm's listing number, or when give is zero
// the next free one of the firm's counter, which then moves past it. It
// reports false when give is taken in this file or in the store. Entries
// are inserted as they are numbered, so the store's answers include the
// file's earlier ones.
func (im *importer) number(ctx context.Context, firmID, give int64) (int64, bool, error) {
	if give != 0 {
		if im.seen[[2]int64{firmID, give}] {
			return 0, false, nil
		}
		taken, err := im.tx.noTaken(ctx, firmID, give)
		if err != nil || taken {
			return 0, false, err
		}
		im.seen[[2]int64{firmID, give}] = true
		return give, true, nil
	}
	start, err := im.tx.nextNo(ctx, firmID)
	if err != nil {
		return 0, false, fmt.Errorf("number counter of firm %d: %w", firmID, err)
	}
	if start < 1 || start > upstream.MaxNumber {
		start = 1
	}
	no, err := im.tx.freeNo(ctx, firmID, start)
	if err == nil && no == 0 && start > 1 {
		no, err = im.tx.freeNo(ctx, firmID, 1) // wrap around
	}
	switch {
	case err != nil:
		return 0, false, fmt.Errorf("free number of firm %d: %w", firmID, err)
	case no == 0:
		return 0, false, errExhausted
	}
	if err := im.tx.setNextNo(ctx, firmID, no+1); err != nil {
		return 0, false, fmt.Errorf("number counter of firm %d: %w", firmID, err)
	}
	im.seen[[2]int64{firmID, no}] = true
	return no, true, nil
}

// errExhausted says that the next id would pass upstream.MaxNumber, or that
// the firm has no free number left.
var errExhausted = errors.New("no value left")

// take claims the id give, or the next free id of c when give is zero. It
// reports false when give is taken in this file or, as taken tells, in the
// store, and errExhausted when give is zero and the largest id so far is
// upstream.MaxNumber (or more, in a store written before the bound). scope
// is 0: the file's numbers are in seen under their firm's id.
func (im *importer) take(c *counter, scope, give int64, taken func() (bool, error)) (int64, bool, error) {
	if give == 0 {
		if c.max >= upstream.MaxNumber {
			return 0, false, errExhausted
		}
		give = c.max + 1
	} else {
		if im.seen[[2]int64{scope, give}] {
			return 0, false, nil
		}
		if give <= c.stored {
			inStore, err := taken()
			if err != nil {
				return 0, false, err
			}
			if inStore {
				return 0, false, nil
			}
		}
	}
	im.seen[[2]int64{scope, give}] = true
	c.max = max(c.max, give)
	return give, true, nil
}

// importTx is the SQL of an import, in its transaction. Deleted listings
// (tombstones) count in every lookup: their ids and numbers are never given
// out again.
type importTx struct {
	tx              Querier
	constraintError func(error) error
}

func (t importTx) firmExists(ctx context.Context, firmID int64) (exists bool, err error) {
	err = t.tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM firms WHERE id = $1)`, firmID).Scan(&exists)
	return exists, err
}

// userFirm returns the firm of user userID, 0 when there is no such user.
func (t importTx) userFirm(ctx context.Context, userID int64) (firmID int64, err error) {
	err = t.tx.QueryRow(ctx, `SELECT firm_id FROM firm_users WHERE id = $1`, userID).Scan(&firmID)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return firmID, err
}

func (t importTx) idTaken(ctx context.Context, id int64) (taken bool, err error) {
	err = t.tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM listings WHERE id = $1)`, id).Scan(&taken)
	return taken, err
}

func (t importTx) noTaken(ctx context.Context, firmID, no int64) (taken bool, err error) {
	err = t.tx.QueryRow(ctx,
		`SELECT EXISTS (SELECT 1 FROM listings WHERE firm_id = $1 AND no = $2)`, firmID, no).Scan(&taken)
	return taken, err
}

// maxID returns the largest listing id, 0 when there is none.
func (t importTx) maxID(ctx context.Context) (id int64, err error) {
	err = t.tx.QueryRow(ctx, `SELECT COALESCE(MAX(id), 0) FROM listings`).Scan(&id)
	return id, err
}

// nextNo reads the firm's number counter: where the search for its next
// free number starts.
func (t importTx) nextNo(ctx context.Context, firmID int64) (no int64, err error) {
	err = t.tx.QueryRow(ctx, `SELECT next_no FROM firms WHERE id = $1`, firmID).Scan(&no)
	return no, err
}

func (t importTx) setNextNo(ctx context.Context, firmID, no int64) error {
	return t.tx.Exec(ctx, `UPDATE firms SET next_no = $2 WHERE id = $1`, firmID, no)
}

// freeNo returns the firm's smallest listing number within [from,
// upstream.MaxNumber] that no listing of the firm has, tombstones
// included, or 0 when there is none. The first free number is from itself
// or follows a taken one, so the candidates are from and each taken
// number + 1: one indexed range read of the numbers from from up, usually
// none.
func (t importTx) freeNo(ctx context.Context, firmID, from int64) (no int64, err error) {
	err = t.tx.QueryRow(ctx,
		`SELECT COALESCE(MIN(c.n), 0) FROM (
		   SELECT CAST($2 AS BIGINT) AS n
		   UNION ALL
		   SELECT no + 1 FROM listings WHERE firm_id = $1 AND no >= $2 AND no < $3
		 ) c
		 WHERE NOT EXISTS (SELECT 1 FROM listings l WHERE l.firm_id = $1 AND l.no = c.n)`,
		firmID, from, int64(upstream.MaxNumber)).Scan(&no)
	return no, err
}

// insert stores l with doc as its document. A constraint violation is
// returned as the domain error alone (upstream.ErrConflict or
// upstream.ErrInvalid), which the entry's *upstream.ImportError carries.
func (t importTx) insert(ctx context.Context, l upstream.Listing, doc []byte) error {
	err := t.tx.Exec(ctx,
		`INSERT INTO listings (id, firm_id, no, firm_user_id, is_active, revision, document)
		 VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		l.ID, l.FirmID, l.No, l.FirmUserID, l.IsActive, l.Revision, string(doc))
	if ce := t.constraintError(err); ce != nil {
		return ce
	}
	return err
}
