package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"

	"github.com/realty-gateway/gateway/upstream"
)

// An import reads its entries in batches of importBatch: for each batch it
// asks the store once per kind of lookup (the firms and their number
// counters, the users, the given ids and the given numbers), settles every
// entry in memory, in file order, and writes the batch in bulk (COPY on an
// engine whose transaction is a Copier, multi-row INSERTs elsewhere).
//
// The writes run one batch behind: while the engine stores a batch, the
// next one, settled just before, has its rows made (the documents
// encoded), so that the engine and the importer work at once. A batch is
// settled while the one before it is not written yet: the lookups see
// every batch before that one, and the one before is remembered, its ids
// and numbers only. Memory stays flat however long the file.
const importBatch = 2000

// insertChunk is how many rows one multi-row INSERT writes. SQLite binds
// each parameter by a search of the statement's parameters, so its cost
// grows with the square of the parameters: 500 of them keep that below
// the rows' own cost.
const insertChunk = 50

// Copier is a transaction that loads rows in bulk, as PostgreSQL's COPY
// does. Every row trigger fires as for an INSERT. It asks for the n rows
// in order, each once, while the copy runs: making a row overlaps with
// the engine storing the rows before it.
type Copier interface {
	CopyFrom(ctx context.Context, table string, columns []string, n int, row func(i int) ([]any, error)) error
}

// Preparer is a transaction that prepares a statement once for many
// executions; close releases it.
type Preparer interface {
	Prepare(ctx context.Context, query string) (exec func(ctx context.Context, args ...any) error, close func() error, err error)
}

// ImportTx is what an import runs on: its transaction, which reads rows.
type ImportTx interface {
	Querier
	RowsQuerier
}

// importColumns are the columns an import writes: the document is the
// response body (schema step 9), kept once and with its tag from the
// start, so that the first read does no JSON work.
var importColumns = []string{"id", "firm_id", "no", "firm_user_id", "is_active", "revision", "document", "etag", "document_body_revision"}

// importer holds what one import learned so far, within its transaction.
// Its maps grow with the firms and users the file names, not with its
// entries.
type importer struct {
	tx              ImportTx
	constraintError func(error) error
	insertQuery     string // a multi-row INSERT of insertChunk rows
	positional      bool   // Engine.PositionalImport
	insertChunk     func(ctx context.Context, args ...any) error
	closeInsert     func() error
	lookupsSetting  string // Engine.ImportLookups
	writesSetting   string // Engine.ImportWrites
	now             int64
	maxID           int64           // the largest id in the store and the file so far
	maxGrave        int64           // the largest id of a removed listing (listing_graves)
	firms           map[int64]*firm // nil: no such firm
	users           map[int64]int64 // user id: its firm id, 0 when unknown
	done            int             // entries stored so far
}

// firm is a firm's number counter as the import moves it.
type firm struct {
	next  int64
	moved bool
}

// batch is one batch's state: its entries, and the ids and numbers the
// store and the batch itself have taken.
type batch struct {
	base     int    // the index of its first entry in the import
	prev     *batch // the batch before, settled and not yet in the store; nil once it is
	entries  []upstream.Listing
	given    []upstream.Listing // the entries as given, for the errors
	rows     [][]any
	idsTaken map[int64]bool
	nosTaken map[[2]int64]bool
	seenIDs  map[int64]bool
	seenNos  map[[2]int64]bool
	windows  map[int64]*window // per firm: the numbers taken near its counter
}

// window is a firm's taken numbers within [lo, hi), read from the store;
// full: every one of them.
type window struct {
	lo, hi int64
	taken  map[int64]bool
	full   bool
}

// numberWindow is how many numbers one read of a firm's taken numbers
// covers.
const numberWindow = 4096

// importStream stores the listings of next through tx as new listings
// written at now (epoch ms), and calls stored with each batch as stored.
// It keeps the given ids and numbers, which must be within [1,
// upstream.MaxNumber], and assigns those that are zero: an id above the
// largest so far, a number from the firm's counter (firms.next_no), the
// first one from there up that no listing of the firm has, starting again
// from 1 past upstream.MaxNumber. An entry at fault is an
// *upstream.ImportError: a value out of range, no id left after
// upstream.MaxNumber, or no number left in the firm, is a
// *upstream.ValidationError for field "id" or "no". An error of next is
// returned as it is. On any error the caller rolls tx back.
func importStream(ctx context.Context, im *importer, next iter.Seq2[upstream.Listing, error], stored func([]upstream.Listing) error) (int, error) {
	if err := im.tx.QueryRow(ctx, `SELECT COALESCE(MAX(id), 0) FROM listings`).Scan(&im.maxID); err != nil {
		return 0, fmt.Errorf("largest id: %w", err)
	}
	if err := im.tx.QueryRow(ctx, `SELECT COALESCE(MAX(id), 0) FROM listing_graves`).Scan(&im.maxGrave); err != nil {
		return 0, fmt.Errorf("largest removed id: %w", err)
	}
	p := &pipeline{im: im, stored: stored}
	defer p.close()
	if err := p.run(ctx, next); err != nil {
		return 0, err
	}
	if err := im.saveCounters(ctx); err != nil {
		return 0, err
	}
	return im.done, nil
}

// pipeline moves an import's batches along, one write behind: a batch is
// settled and its rows made while the one before it is written.
type pipeline struct {
	im     *importer
	stored func([]upstream.Listing) error // told of each batch as stored; may be nil
	ready  *batch                         // settled, its rows made: written next
	flight *write                         // the batch before ready, being written; nil when none
	spare  []upstream.Listing             // a landed batch's entries, reused for the next
}

// run reads next in batches of importBatch and moves each along, then
// writes the last.
func (p *pipeline) run(ctx context.Context, next iter.Seq2[upstream.Listing, error]) error {
	b := &batch{}
	for l, err := range next {
		if err != nil {
			return &inputErr{err}
		}
		b.given = append(b.given, l)
		if len(b.given) == importBatch {
			if err := p.advance(ctx, b); err != nil {
				return err
			}
			b, p.spare = &batch{given: p.spare}, nil
		}
	}
	if len(b.given) > 0 {
		if err := p.advance(ctx, b); err != nil {
			return err
		}
	}
	return p.advance(ctx, nil)
}

// advance settles b, starts the write of ready, makes b's rows meanwhile,
// and lands the write; b is ready then. A nil b writes the last batch.
func (p *pipeline) advance(ctx context.Context, b *batch) error {
	im := p.im
	if b != nil {
		b.prev, b.base = p.ready, im.done
		if p.ready != nil {
			b.base = p.ready.base + len(p.ready.given)
		}
		if err := im.settle(ctx, b); err != nil {
			return err
		}
	}
	if p.ready != nil {
		if err := im.setting(ctx, im.writesSetting); err != nil {
			return err
		}
		p.flight = &write{b: p.ready, done: make(chan error, 1)}
		go func(w *write) { w.done <- im.insert(ctx, w.b) }(p.flight)
	}
	p.ready = b
	if b != nil {
		if err := im.makeRows(b); err != nil {
			return err
		}
	}
	return p.land()
}

// land waits for the write in flight and tells stored of its batch.
func (p *pipeline) land() error {
	if p.flight == nil {
		return nil
	}
	w := p.flight
	p.flight = nil
	if err := <-w.done; err != nil {
		return err
	}
	if p.ready != nil {
		p.ready.prev = nil // in the store now
	}
	if p.stored != nil {
		if err := p.stored(w.b.entries); err != nil {
			return err
		}
	}
	p.im.done += len(w.b.entries)
	p.spare = w.b.given[:0]
	return nil
}

// close lands the write in flight, if any, and releases the prepared
// insert: a return on an error must not leave the transaction busy.
func (p *pipeline) close() {
	_ = p.land()
	if p.im.closeInsert != nil {
		_ = p.im.closeInsert() // the rollback or commit that follows ends it anyway
	}
}

// saveCounters stores the number counters of the firms the import moved.
func (im *importer) saveCounters(ctx context.Context) error {
	for id, f := range im.firms {
		if f != nil && f.moved {
			if err := im.tx.Exec(ctx, `UPDATE firms SET next_no = $2 WHERE id = $1`, id, f.next); err != nil {
				return fmt.Errorf("number counter of firm %d: %w", id, err)
			}
		}
	}
	return nil
}

// write is a batch's write, on the transaction in the background: done
// gets its outcome.
type write struct {
	b    *batch
	done chan error
}

// settle looks up what b's entries need and settles each, in file order.
func (im *importer) settle(ctx context.Context, b *batch) error {
	if err := im.setting(ctx, im.lookupsSetting); err != nil {
		return err
	}
	if err := im.prefetch(ctx, b); err != nil {
		return err
	}
	b.seenIDs, b.seenNos = map[int64]bool{}, map[[2]int64]bool{}
	b.entries = make([]upstream.Listing, len(b.given))
	for i, l := range b.given {
		var err error
		if b.entries[i], err = im.add(ctx, b, l); err != nil {
			return im.fault(b.base+i, l, err)
		}
	}
	return im.readGraves(ctx, b)
}

// readGraves gives b's entries that take the id of a removed listing the
// revision the store's insert trigger gives them, one above the
// removal's, so that the listings returned, cached and floored carry the
// revision stored. Only an id up to the largest removed one can have a
// grave: most imports ask nothing.
func (im *importer) readGraves(ctx context.Context, b *batch) error {
	var ids []any
	at := map[int64]int{}
	for i, l := range b.entries {
		if l.ID <= im.maxGrave {
			ids, at[l.ID] = append(ids, l.ID), i
		}
	}
	if len(ids) == 0 {
		return nil
	}
	err := im.each(ctx, `SELECT id, revision FROM listing_graves WHERE id IN (`+placeholders(len(ids), 1)+`)`, ids,
		func(r Rows) error {
			var id, removed int64
			if err := r.Scan(&id, &removed); err != nil {
				return err
			}
			b.entries[at[id]].Revision = removed + 1
			return nil
		})
	if err != nil {
		return fmt.Errorf("removed ids: %w", err)
	}
	return nil
}

// idSeen and noSeen report whether b, or the batch before it, took an id,
// or a firm's number.
func (b *batch) idSeen(id int64) bool {
	return b.seenIDs[id] || b.prev != nil && b.prev.seenIDs[id]
}

func (b *batch) noSeen(k [2]int64) bool {
	return b.seenNos[k] || b.prev != nil && b.prev.seenNos[k]
}

// setting runs one of the engine's import settings, where it has one.
func (im *importer) setting(ctx context.Context, statement string) error {
	if statement == "" {
		return nil
	}
	if err := im.tx.Exec(ctx, statement); err != nil {
		return fmt.Errorf("import setting: %w", err)
	}
	return nil
}

// fault names entry index as the cause of err where err is the entry's
// fault.
func (im *importer) fault(index int, l upstream.Listing, err error) error {
	var de *domainErr
	if errors.As(err, &de) {
		return &upstream.ImportError{Index: index, ID: l.ID, Err: de.err}
	}
	return fmt.Errorf("entry %d: %w", index, err)
}

// prefetch reads what the batch's entries need of the store, one query per
// kind: firms not seen before with their counters, users, the given ids up
// to the largest so far (an id above it can be taken only in this batch)
// and the given numbers. Values out of range are left to add's checks.
func (im *importer) prefetch(ctx context.Context, b *batch) error {
	n := im.needs(b)
	if err := im.readFirms(ctx, n.firmIDs); err != nil {
		return err
	}
	if err := im.readUsers(ctx, n.userIDs); err != nil {
		return err
	}
	if err := im.readTakenIDs(ctx, b, n.ids); err != nil {
		return err
	}
	return im.readTakenNumbers(ctx, b, n.nos)
}

// lookups are what a batch's entries need of the store.
type lookups struct {
	firmIDs, userIDs []any           // firms and users not seen before
	ids              []any           // given ids up to the largest so far
	nos              map[int64][]any // given numbers per firm
}

// needs lists what b's entries need of the store, each value once.
func (im *importer) needs(b *batch) lookups {
	n := lookups{nos: map[int64][]any{}}
	seen := map[int64]bool{}
	for _, l := range b.given {
		if _, ok := im.firms[l.FirmID]; !ok && !seen[l.FirmID] {
			seen[l.FirmID] = true
			n.firmIDs = append(n.firmIDs, l.FirmID)
		}
		if _, ok := im.users[l.FirmUserID]; !ok && !seen[-l.FirmUserID-1] {
			seen[-l.FirmUserID-1] = true // users keyed apart from firms
			n.userIDs = append(n.userIDs, l.FirmUserID)
		}
		if l.ID >= 1 && l.ID <= im.maxID {
			n.ids = append(n.ids, l.ID)
		}
		if l.No >= 1 && l.No <= upstream.MaxNumber {
			n.nos[l.FirmID] = append(n.nos[l.FirmID], l.No)
		}
	}
	return n
}

// readFirms reads the firms' number counters; a firm not found stays
// nil, as unknown.
func (im *importer) readFirms(ctx context.Context, firmIDs []any) error {
	if len(firmIDs) == 0 {
		return nil
	}
	for _, id := range firmIDs {
		im.firms[id.(int64)] = nil
	}
	err := im.each(ctx, `SELECT id, next_no FROM firms WHERE id IN (`+placeholders(len(firmIDs), 1)+`)`, firmIDs,
		func(r Rows) error {
			var id, next int64
			if err := r.Scan(&id, &next); err != nil {
				return err
			}
			im.firms[id] = &firm{next: next}
			return nil
		})
	if err != nil {
		return fmt.Errorf("firms: %w", err)
	}
	return nil
}

// readUsers reads the users' firms; a user not found stays 0, as unknown.
func (im *importer) readUsers(ctx context.Context, userIDs []any) error {
	if len(userIDs) == 0 {
		return nil
	}
	for _, id := range userIDs {
		im.users[id.(int64)] = 0
	}
	err := im.each(ctx, `SELECT id, firm_id FROM firm_users WHERE id IN (`+placeholders(len(userIDs), 1)+`)`, userIDs,
		func(r Rows) error {
			var id, firmID int64
			if err := r.Scan(&id, &firmID); err != nil {
				return err
			}
			im.users[id] = firmID
			return nil
		})
	if err != nil {
		return fmt.Errorf("users: %w", err)
	}
	return nil
}

// readTakenIDs reads which of the given ids the store has, into b.
func (im *importer) readTakenIDs(ctx context.Context, b *batch, ids []any) error {
	b.idsTaken = map[int64]bool{}
	if len(ids) == 0 {
		return nil
	}
	err := im.each(ctx, `SELECT id FROM listings WHERE id IN (`+placeholders(len(ids), 1)+`)`, ids,
		func(r Rows) error {
			var id int64
			err := r.Scan(&id)
			b.idsTaken[id] = true
			return err
		})
	if err != nil {
		return fmt.Errorf("ids taken: %w", err)
	}
	return nil
}

// readTakenNumbers reads which of the given numbers, per firm, the store
// has, into b.
func (im *importer) readTakenNumbers(ctx context.Context, b *batch, nos map[int64][]any) error {
	b.nosTaken = map[[2]int64]bool{}
	for firmID, nos := range nos {
		// Per firm, an IN list that the (firm_id, no) index answers; a
		// list of pairs is a filter over a scan on PostgreSQL.
		args := append([]any{firmID}, nos...)
		err := im.each(ctx, `SELECT no FROM listings WHERE firm_id = $1 AND no IN (`+placeholdersFrom(2, len(nos))+`)`, args,
			func(r Rows) error {
				var no int64
				err := r.Scan(&no)
				b.nosTaken[[2]int64{firmID, no}] = true
				return err
			})
		if err != nil {
			return fmt.Errorf("numbers taken: %w", err)
		}
	}
	return nil
}

// placeholdersFrom lists n parameters from $from on.
func placeholdersFrom(from, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(from + i))
	}
	return b.String()
}

// each runs query and calls scan for every row.
func (im *importer) each(ctx context.Context, query string, args []any, scan func(Rows) error) error {
	rows, err := im.tx.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// inputErr carries an error of the import's input, returned as it is.
type inputErr struct{ err error }

func (e *inputErr) Error() string { return e.err.Error() }

// domainErr marks an entry's fault, as opposed to a failure of the store.
type domainErr struct{ err error }

func (e *domainErr) Error() string { return e.err.Error() }

func reject(format string, args ...any) error {
	return &domainErr{err: fmt.Errorf(format, args...)}
}

// add settles one entry of b: its id, number, owner and dates.
func (im *importer) add(ctx context.Context, b *batch, l upstream.Listing) (upstream.Listing, error) {
	if err := upstream.CheckNumber("id", l.ID); err != nil {
		return l, reject("id %d: %w", l.ID, err)
	}
	if err := upstream.CheckNumber("no", l.No); err != nil {
		return l, reject("no %d: %w", l.No, err)
	}
	f := im.firms[l.FirmID]
	if f == nil {
		return l, reject("unknown firm %d: %w", l.FirmID, upstream.ErrInvalid)
	}
	if im.users[l.FirmUserID] != l.FirmID {
		return l, reject("firm %d has no user %d: %w", l.FirmID, l.FirmUserID, upstream.ErrInvalid)
	}

	id := l.ID
	switch {
	case id == 0 && im.maxID >= upstream.MaxNumber:
		return l, reject("next id: %w", upstream.Invalid("id",
			fmt.Sprintf("has no free value: listing ids reach the largest allowed, %d", int64(upstream.MaxNumber))))
	case id == 0:
		id = im.maxID + 1
	case b.idSeen(id) || b.idsTaken[id]:
		return l, reject("id %d taken: %w", l.ID, upstream.ErrConflict)
	}
	no := l.No
	if no != 0 {
		if k := [2]int64{l.FirmID, no}; b.noSeen(k) || b.nosTaken[k] {
			return l, reject("listing %s taken: %w", upstream.ListingNumber(l.FirmID, l.No), upstream.ErrConflict)
		}
	} else {
		var err error
		switch no, err = im.number(ctx, b, l.FirmID, f); {
		case errors.Is(err, errExhausted):
			return l, reject("next number of firm %d: %w", l.FirmID, upstream.Invalid("no",
				fmt.Sprintf("has no free value: every listing number of the firm up to the largest allowed, %d, is in use; give an unused one",
					int64(upstream.MaxNumber))))
		case err != nil:
			return l, err
		}
	}
	b.seenIDs[id], b.seenNos[[2]int64{l.FirmID, no}] = true, true
	im.maxID = max(im.maxID, id)
	l.ID, l.No = id, no

	if l.CreatedDate == 0 {
		l.CreatedDate = im.now
	}
	if l.UpdatedDate == 0 {
		l.UpdatedDate = l.CreatedDate
	}
	l.Revision = 1
	l.Normalize()
	return l, nil
}

// makeRows makes the rows that store b's entries.
func (im *importer) makeRows(b *batch) error {
	b.rows = make([][]any, len(b.entries))
	for i, l := range b.entries {
		doc, err := json.Marshal(l)
		if err != nil {
			return fmt.Errorf("entry %d: encode: %w", b.base+i, err)
		}
		// The response body is the document itself: a read lays the
		// columns, which are l's own, over the decoded document, and
		// encodes that, and JSON that encoding/json wrote decodes and
		// encodes to the same bytes (the conformance suite's
		// FullListingRoundTrip compares the two).
		b.rows[i] = []any{l.ID, l.FirmID, l.No, l.FirmUserID, l.IsActive, l.Revision, string(doc), string(upstream.ETag(doc)), l.Revision}
	}
	return nil
}

// errExhausted says that the firm has no free number left.
var errExhausted = errors.New("no value left")

// number claims the next free number of firm f's counter, which then
// moves past it: the first from the counter up that neither the store nor
// the batch has, starting again from 1 past upstream.MaxNumber.
func (im *importer) number(ctx context.Context, b *batch, firmID int64, f *firm) (int64, error) {
	start := f.next
	if start < 1 || start > upstream.MaxNumber {
		start = 1
	}
	no, err := im.nextFree(ctx, b, firmID, start)
	if err == nil && no == 0 && start > 1 {
		no, err = im.nextFree(ctx, b, firmID, 1) // wrap around
	}
	switch {
	case err != nil:
		return 0, err
	case no == 0:
		return 0, errExhausted
	}
	f.next, f.moved = no+1, true
	return no, nil
}

// nextFree returns the firm's smallest number from from up that neither
// the store nor the batch has, or 0 when there is none up to
// upstream.MaxNumber. It reads the store a window of numbers at a time;
// where a window is full it asks the store for the next free number past
// it, so a dense run of taken numbers costs one query.
func (im *importer) nextFree(ctx context.Context, b *batch, firmID, from int64) (int64, error) {
	if b.windows == nil {
		b.windows = map[int64]*window{}
	}
	for no := from; no <= upstream.MaxNumber; {
		w := b.windows[firmID]
		if w == nil || no < w.lo || no >= w.hi {
			var err error
			if w, err = im.window(ctx, firmID, no); err != nil {
				return 0, err
			}
			b.windows[firmID] = w
		}
		switch {
		case w.full:
			no = w.hi
		case w.taken[no] || b.noSeen([2]int64{firmID, no}):
			no++
		default:
			return no, nil
		}
	}
	return 0, nil
}

// window reads the firm's taken numbers from no up. A full window (every
// number taken) reaches up to the next free number instead.
func (im *importer) window(ctx context.Context, firmID, no int64) (*window, error) {
	w := &window{lo: no, hi: min(no+numberWindow, upstream.MaxNumber+1), taken: map[int64]bool{}}
	err := im.each(ctx, `SELECT no FROM listings WHERE firm_id = $1 AND no >= $2 AND no < $3`, []any{firmID, w.lo, w.hi},
		func(r Rows) error {
			var n int64
			err := r.Scan(&n)
			w.taken[n] = true
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("numbers of firm %d: %w", firmID, err)
	}
	if int64(len(w.taken)) < w.hi-w.lo || w.hi > upstream.MaxNumber {
		return w, nil
	}
	free, err := im.freeNo(ctx, firmID, w.hi)
	if err != nil {
		return nil, fmt.Errorf("free number of firm %d: %w", firmID, err)
	}
	w.full, w.taken = true, nil
	if free == 0 { // none up to the bound
		w.hi = upstream.MaxNumber + 1
	} else {
		w.hi = free
	}
	return w, nil
}

// freeNo returns the firm's smallest listing number within [from,
// upstream.MaxNumber] that no listing of the firm has, tombstones
// included, or 0 when there is none. The first free number is from itself
// or follows a taken one, so the candidates are from and each taken
// number + 1: one indexed range read of the numbers from from up.
func (im *importer) freeNo(ctx context.Context, firmID, from int64) (no int64, err error) {
	err = im.tx.QueryRow(ctx,
		`SELECT COALESCE(MIN(c.n), 0) FROM (
		   SELECT CAST($2 AS BIGINT) AS n
		   UNION ALL
		   SELECT no + 1 FROM listings WHERE firm_id = $1 AND no >= $2 AND no < $3
		 ) c
		 WHERE NOT EXISTS (SELECT 1 FROM listings l WHERE l.firm_id = $1 AND l.no = c.n)`,
		firmID, from, int64(upstream.MaxNumber)).Scan(&no)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return no, err
}

// insert writes the batch's rows in bulk, under a savepoint: where the
// store refuses one (a constraint that the lookups did not foresee), it
// goes back and inserts them one at a time to name the entry at fault.
func (im *importer) insert(ctx context.Context, b *batch) error {
	if len(b.rows) == 1 { // POST /realty: its own error names it, no savepoint needed
		return im.insertOne(ctx, b, 0)
	}
	if err := im.tx.Exec(ctx, `SAVEPOINT import_batch`); err != nil {
		return err
	}
	err := im.bulk(ctx, b)
	if err != nil && im.constraintError(err) == nil {
		return fmt.Errorf("insert entries %d to %d: %w", b.base, b.base+len(b.rows)-1, err)
	}
	if err == nil {
		return im.tx.Exec(ctx, `RELEASE SAVEPOINT import_batch`)
	}
	if err := im.tx.Exec(ctx, `ROLLBACK TO SAVEPOINT import_batch`); err != nil {
		return err
	}
	for i := range b.rows {
		if err := im.insertOne(ctx, b, i); err != nil {
			return err
		}
	}
	return fmt.Errorf("bulk insert refused, row by row accepted: %w", err)
}

// insertOne inserts the batch's row i alone; a constraint violation is
// that entry's fault.
func (im *importer) insertOne(ctx context.Context, b *batch, i int) error {
	err := im.tx.Exec(ctx, insertStatement(1, false), b.rows[i]...)
	if ce := im.constraintError(err); ce != nil {
		l := b.entries[i]
		return im.fault(b.base+i, b.given[i], reject("listing %d or %s: %w", l.ID, l.ListingID, ce))
	}
	return err
}

// bulk inserts b's rows: by COPY where the transaction can, else in
// multi-row INSERTs of insertChunk rows.
func (im *importer) bulk(ctx context.Context, b *batch) error {
	if c, ok := im.tx.(Copier); ok && len(b.rows) >= copyMin {
		return c.CopyFrom(ctx, "listings", importColumns, len(b.rows), func(i int) ([]any, error) { return b.rows[i], nil })
	}
	args := make([]any, 0, insertChunk*len(importColumns))
	for from := 0; from < len(b.rows); {
		n := min(len(b.rows)-from, insertChunk)
		args = args[:0]
		for _, row := range b.rows[from : from+n] {
			args = append(args, row...)
		}
		var err error
		switch p, ok := im.tx.(Preparer); {
		case n < insertChunk:
			err = im.tx.Exec(ctx, insertStatement(n, im.positional), args...)
		case ok && im.insertChunk == nil:
			if im.insertChunk, im.closeInsert, err = p.Prepare(ctx, im.insertQuery); err != nil {
				return err
			}
			fallthrough
		case ok:
			err = im.insertChunk(ctx, args...)
		default:
			err = im.tx.Exec(ctx, im.insertQuery, args...)
		}
		if err != nil {
			return err
		}
		from += n
	}
	return nil
}

// copyMin is the fewest rows that go by COPY: it asks the table's column
// types first, a round trip that a few rows' INSERT does not need.
const copyMin = 16

// insertStatement inserts n rows of importColumns, with "?" parameters
// where positional.
func insertStatement(n int, positional bool) string {
	values := placeholders(n, len(importColumns))
	if positional {
		row := "(" + strings.Repeat("?, ", len(importColumns)-1) + "?)"
		values = strings.Repeat(row+", ", n-1) + row
	}
	return `INSERT INTO listings (` + strings.Join(importColumns, ", ") + `) VALUES ` + values
}
