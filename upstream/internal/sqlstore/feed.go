package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

// The change feed's statements, shared by the engines. The tables and the
// triggers that fill them are each engine's schema step 5; see
// upstream.Feed for what the feed promises.

// Rows is a result of several rows, as pgx.Rows is (database/sql's needs
// an adapter for Close).
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// RowsQuerier runs a query for any number of rows.
type RowsQuerier interface {
	Query(ctx context.Context, query string, args ...any) (Rows, error)
}

// FeedDB is what the feed's statements run on: a pool, or the one
// connection that holds the feed.
type FeedDB interface {
	DB
	RowsQuerier
}

// Feed is the part of upstream.Feed that every gateway uses, on the pool.
// An engine adds Acquire.
type Feed struct {
	db FeedDB
	// now is the engine's SQL expression of the database's clock in
	// milliseconds since 1970.
	now string
}

// NewFeed returns the feed's shared statements on db; nowMillis is the
// engine's expression of the current time in milliseconds.
func NewFeed(db FeedDB, nowMillis string) *Feed {
	return &Feed{db: db, now: nowMillis}
}

const changeColumns = `seq, listing_id, firm_id, no, COALESCE(old_firm_id, 0), COALESCE(old_no, 0), revision,
	visible_before, visible_after, deleted, changed_at, applied_at IS NOT NULL, replayed`

func scanChanges(rows Rows, err error) ([]upstream.Change, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []upstream.Change
	for rows.Next() {
		var c upstream.Change
		var changedAt int64
		if err := rows.Scan(&c.Seq, &c.ListingID, &c.FirmID, &c.No, &c.OldFirmID, &c.OldNo, &c.Revision,
			&c.VisibleBefore, &c.VisibleAfter, &c.Deleted, &changedAt, &c.Applied, &c.Replayed); err != nil {
			return nil, err
		}
		c.ChangedAt = time.UnixMilli(changedAt)
		out = append(out, c)
	}
	return out, rows.Err()
}

// Position reads the adopted Redis and the highest sequence number.
func (f *Feed) Position(ctx context.Context) (upstream.FeedPosition, error) {
	var p upstream.FeedPosition
	err := f.db.QueryRow(ctx, `SELECT redis_identity, COALESCE((SELECT max(seq) FROM listing_changes), 0)
		FROM feed_state WHERE id = 1`).Scan(&p.RedisIdentity, &p.LastSeq)
	if err != nil {
		return p, fmt.Errorf("feed position: %w", err)
	}
	return p, nil
}

// Unapplied returns changes up to upTo not applied yet.
func (f *Feed) Unapplied(ctx context.Context, upTo int64, limit int) ([]upstream.Change, error) {
	cs, err := scanChanges(f.db.Query(ctx, `SELECT `+changeColumns+` FROM listing_changes
		WHERE done_at IS NULL AND applied_at IS NULL AND seq <= $1 ORDER BY seq LIMIT $2`, upTo, limit))
	if err != nil {
		return nil, fmt.Errorf("unapplied changes: %w", err)
	}
	return cs, nil
}

// CaughtUp reports whether every change up to upTo was applied.
func (f *Feed) CaughtUp(ctx context.Context, upTo int64) (bool, error) {
	var behind bool
	err := f.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM listing_changes
		WHERE done_at IS NULL AND applied_at IS NULL AND seq <= $1)`, upTo).Scan(&behind)
	if err != nil {
		return false, fmt.Errorf("feed caught up: %w", err)
	}
	return !behind, nil
}

// Applied reports whether every change of the listing up to revision
// was applied.
func (f *Feed) Applied(ctx context.Context, listingID, revision int64) (bool, error) {
	var behind bool
	err := f.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM listing_changes
		WHERE done_at IS NULL AND applied_at IS NULL AND listing_id = $1 AND revision <= $2)`, listingID, revision).Scan(&behind)
	if err != nil {
		return false, fmt.Errorf("listing change applied: %w", err)
	}
	return !behind, nil
}

// Settle marks the changes that wrote these versions applied and done,
// while the adopted Redis is redisIdentity.
func (f *Feed) Settle(ctx context.Context, redisIdentity string, versions []upstream.Settled) error {
	if len(versions) == 0 {
		return nil
	}
	args := []any{redisIdentity}
	var match strings.Builder
	for i, v := range versions {
		if i > 0 {
			match.WriteString(" OR ")
		}
		fmt.Fprintf(&match, "(listing_id = $%d AND revision = $%d)", len(args)+1, len(args)+2)
		args = append(args, v.ID, v.Revision)
	}
	err := f.db.Exec(ctx, `UPDATE listing_changes SET applied_at = `+f.now+`, done_at = `+f.now+`
		WHERE done_at IS NULL AND applied_at IS NULL AND (`+match.String()+`)
		  AND EXISTS (SELECT 1 FROM feed_state WHERE id = 1 AND redis_identity = $1)`, args...)
	if err != nil {
		return fmt.Errorf("settle changes: %w", err)
	}
	return nil
}

// Session is the consumer's side of upstream.FeedSession: the statements
// it runs on db, the connection (or pool) that holds the feed. The engine
// supplies how the hold is renewed, how long it lasts and how it is
// given up.
type Session struct {
	db    FeedDB
	now   string
	lease time.Duration
	renew func(ctx context.Context) error
	close func(ctx context.Context) error
}

// NewSession returns a session whose statements run on db.
func NewSession(db FeedDB, nowMillis string, lease time.Duration, renew, close func(ctx context.Context) error) *Session {
	return &Session{db: db, now: nowMillis, lease: lease, renew: renew, close: close}
}

var _ upstream.FeedSession = (*Session)(nil)

func (s *Session) Renew(ctx context.Context) error { return s.renew(ctx) }

func (s *Session) Lease() time.Duration { return s.lease }

func (s *Session) Close(ctx context.Context) error { return s.close(ctx) }

func (s *Session) Pending(ctx context.Context, settle time.Duration, limit int) ([]upstream.Change, error) {
	cs, err := scanChanges(s.db.Query(ctx, `SELECT `+changeColumns+` FROM listing_changes
		WHERE done_at IS NULL AND applied_at IS NULL AND changed_at <= `+s.now+` - $1
		ORDER BY seq LIMIT $2`, settle.Milliseconds(), limit))
	if err != nil {
		return nil, fmt.Errorf("pending changes: %w", err)
	}
	return cs, nil
}

func (s *Session) Unpurged(ctx context.Context, after time.Duration, limit int) ([]upstream.Change, error) {
	cs, err := scanChanges(s.db.Query(ctx, `SELECT `+changeColumns+` FROM listing_changes
		WHERE done_at IS NULL AND applied_at <= `+s.now+` - $1
		ORDER BY seq LIMIT $2`, after.Milliseconds(), limit))
	if err != nil {
		return nil, fmt.Errorf("unpurged changes: %w", err)
	}
	return cs, nil
}

// keepBodies keeps the bodies that states made (for Listings and
// KeepBodies), which the next miss of each serves, and gives each state
// the time that records for its revision: 0 where the row changed again
// (its own change comes next, and this version goes without a
// Last-Modified).
func (s *Session) keepBodies(ctx context.Context, encoded []upstream.Encoded, out map[int64]upstream.ListingState) error {
	for _, e := range encoded {
		modified, err := keepBody(ctx, s.db, storeBodyQuery(s.now), e)
		if err != nil {
			return fmt.Errorf("keep listing body: %w", err)
		}
		st := out[e.ID]
		st.Encoded.Modified = modified
		out[e.ID] = st
	}
	return nil
}

// Listings reads the rows of ids: the listing as a read returns it, or a
// tombstone; an id without a row is Gone. It keeps the body it made for a
// live listing without a current one, and answers its kept date.
func (s *Session) Listings(ctx context.Context, ids []int64) (map[int64]upstream.ListingState, error) {
	out, encoded, err := s.states(ctx, ids)
	if err != nil {
		return nil, err
	}
	if err := s.keepBodies(ctx, encoded, out); err != nil {
		return nil, err
	}
	for _, id := range ids {
		if _, ok := out[id]; !ok {
			out[id] = upstream.ListingState{Listing: upstream.Listing{ID: id}, Gone: true}
		}
	}
	return out, nil
}

// KeepBodies keeps the response body of each live listing of ids whose
// kept body is not current.
func (s *Session) KeepBodies(ctx context.Context, ids []int64) error {
	out, encoded, err := s.states(ctx, ids)
	if err != nil {
		return err
	}
	return s.keepBodies(ctx, encoded, out)
}

// states reads the rows of ids, and the bodies it made for live listings
// without a current one, for keepBodies.
func (s *Session) states(ctx context.Context, ids []int64) (map[int64]upstream.ListingState, []upstream.Encoded, error) {
	out := make(map[int64]upstream.ListingState, len(ids))
	if len(ids) == 0 {
		return out, nil, nil
	}
	in, args := inList(ids, 0)
	rows, err := s.db.Query(ctx, `SELECT id, firm_id, no, firm_user_id, is_active, revision, deleted, document,
		CASE WHEN body_revision = revision THEN body END, `+currentTag+`, `+currentModified+`
		FROM listings WHERE id IN (`+in+`)`, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("changed listings: %w", err)
	}
	defer rows.Close()
	var encoded []upstream.Encoded // to keep: made here
	for rows.Next() {
		var (
			st        upstream.ListingState
			c         columns
			doc, body []byte
			etag      *string
			modified  *int64
		)
		if err := rows.Scan(&c.id, &c.firmID, &c.no, &c.firmUserID, &c.active, &c.revision, &st.Deleted, &doc, &body, &etag, &modified); err != nil {
			return nil, nil, fmt.Errorf("changed listings: %w", err)
		}
		if !st.Deleted {
			st.Listing, err = c.listing(doc)
		}
		if err == nil && !st.Deleted {
			if body := keptBody(body, doc, etag); body != nil {
				st.Encoded = upstream.Encoded{ID: c.id, FirmID: c.firmID, No: c.no, Revision: c.revision, Active: c.active, Body: body, ETag: []byte(*etag),
					Modified: deref(modified)}
			} else if st.Encoded, err = upstream.Encode(st.Listing); err == nil {
				encoded = append(encoded, st.Encoded)
			}
		}
		if st.Deleted || err != nil {
			// A document that does not decode is cached nowhere: reads
			// meet it in the store.
			st.Gone = err != nil
			st.Listing = upstream.Listing{ID: c.id, FirmID: c.firmID, No: c.no, Revision: c.revision}
			st.Encoded = upstream.Encoded{}
		}
		out[c.id] = st
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("changed listings: %w", err)
	}
	return out, encoded, nil
}

func (s *Session) StaleBodies(ctx context.Context, after int64, limit int) ([]int64, error) {
	// A body is kept where its tag is current (currentTag): in body, or
	// the document itself after an import.
	rows, err := s.db.Query(ctx, `SELECT id FROM listings
		WHERE id > $1 AND NOT deleted AND (`+currentTag+`) IS NULL
		ORDER BY id LIMIT $2`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("stale bodies: %w", err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("stale bodies: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("stale bodies: %w", err)
	}
	return ids, nil
}

func (s *Session) MarkApplied(ctx context.Context, seqs []int64, done bool) error {
	set := `applied_at = COALESCE(applied_at, ` + s.now + `)`
	if done {
		set += `, done_at = COALESCE(done_at, ` + s.now + `)`
	}
	return s.mark(ctx, "mark applied", set, seqs)
}

func (s *Session) MarkDone(ctx context.Context, seqs []int64) error {
	return s.mark(ctx, "mark done", `done_at = COALESCE(done_at, `+s.now+`)`, seqs)
}

func (s *Session) mark(ctx context.Context, what, set string, seqs []int64) error {
	if len(seqs) == 0 {
		return nil
	}
	in, args := inList(seqs, 0)
	if err := s.db.Exec(ctx, `UPDATE listing_changes SET `+set+` WHERE seq IN (`+in+`)`, args...); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// replayBatch bounds the changes that one transaction of Adopt marks for
// replay, so that a window of many changes (an import's) replays in short
// transactions, each well within the serving statement_timeout; in one
// statement, 200,000 changes outlasted it on every try, and the new Redis
// was never adopted.
const replayBatch = 2000

// markForReplay marks the changes its WHERE names not applied, for the
// new Redis; replayed: the CDN needs no second purge.
const markForReplay = `UPDATE listing_changes SET applied_at = NULL, done_at = NULL, replayed = TRUE WHERE `

func (s *Session) Adopt(ctx context.Context, redisIdentity string, replay time.Duration) (int64, error) {
	var (
		current string
		since   int64 // the window's start, by the database's clock, fixed for the whole replay
	)
	err := s.db.QueryRow(ctx, `SELECT redis_identity, `+s.now+` - $1 FROM feed_state WHERE id = 1`,
		replay.Milliseconds()).Scan(&current, &since)
	if err != nil {
		return 0, fmt.Errorf("adopt redis: %w", err)
	}
	if current == redisIdentity {
		return 0, nil
	}
	// The new Redis may lack anything applied within the replay window:
	// apply it again, without purging the CDN a second time. The marks go
	// in batches, the old Redis still adopted meanwhile, so a replay cut
	// short goes on where it stopped at the next try: the changes it
	// marked are no longer applied.
	var n int64
	for after := int64(0); ; {
		upper, marked, err := s.markReplayed(ctx, after, since)
		if err != nil {
			return 0, fmt.Errorf("adopt redis: %w", err)
		}
		n += marked
		if marked < replayBatch {
			break
		}
		after = upper
	}
	last, err := s.switchRedis(ctx, redisIdentity, since)
	if err != nil {
		return 0, fmt.Errorf("adopt redis: %w", err)
	}
	return n + last, nil
}

// markReplayed marks the next batch of changes after seq after, applied
// since since, for replay; it returns the last seq of the batch and how
// many it marked.
func (s *Session) markReplayed(ctx context.Context, after, since int64) (upper, n int64, err error) {
	err = inTx(ctx, s.db, func(tx Querier) error {
		err := tx.QueryRow(ctx, `SELECT COALESCE(max(seq), 0), count(*) FROM (SELECT seq FROM listing_changes
			WHERE seq > $1 AND applied_at IS NOT NULL AND changed_at >= $2 ORDER BY seq LIMIT $3) batch`,
			after, since, replayBatch).Scan(&upper, &n)
		if err != nil || n == 0 {
			return err
		}
		return tx.Exec(ctx, markForReplay+`seq > $1 AND seq <= $2 AND applied_at IS NOT NULL AND changed_at >= $3`,
			after, upper, since)
	})
	return upper, n, err
}

// switchRedis adopts redisIdentity, marking for replay, in the same
// transaction, what a writer settled behind the batches (the window holds
// few such changes by now).
func (s *Session) switchRedis(ctx context.Context, redisIdentity string, since int64) (n int64, err error) {
	err = inTx(ctx, s.db, func(tx Querier) error {
		const window = `applied_at IS NOT NULL AND changed_at >= $1`
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM listing_changes WHERE `+window, since).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			if err := tx.Exec(ctx, markForReplay+window, since); err != nil {
				return err
			}
		}
		return tx.Exec(ctx, `UPDATE feed_state SET redis_identity = $1 WHERE id = 1`, redisIdentity)
	})
	return n, err
}

// Undone reads the partial index of the changes not done: no write, and
// on an idle feed an empty index.
func (s *Session) Undone(ctx context.Context) (bool, error) {
	var undone bool
	if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM listing_changes WHERE done_at IS NULL)`).Scan(&undone); err != nil {
		return false, fmt.Errorf("feed undone: %w", err)
	}
	return undone, nil
}

// AwaitEvery is how often AwaitUndone asks while it waits, where the
// engine has no better way to wait.
const AwaitEvery = 100 * time.Millisecond

// AwaitUndone asks Undone every AwaitEvery until a change is not done or
// wait has passed: the engines replace it with a wait that asks less.
func (s *Session) AwaitUndone(ctx context.Context, wait time.Duration) (bool, error) {
	deadline := time.Now().Add(wait)
	for {
		undone, err := s.Undone(ctx)
		left := time.Until(deadline)
		if err != nil || undone || left <= 0 {
			return undone, err
		}
		t := time.NewTimer(min(AwaitEvery, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-t.C:
		}
	}
}

func (s *Session) Backlog(ctx context.Context) (rows int64, lag time.Duration, err error) {
	var lagMillis int64
	err = s.db.QueryRow(ctx, `SELECT count(*), COALESCE(`+s.now+` - min(changed_at), 0) FROM listing_changes
		WHERE done_at IS NULL AND applied_at IS NULL`).Scan(&rows, &lagMillis)
	if err != nil {
		return 0, 0, fmt.Errorf("feed backlog: %w", err)
	}
	return rows, time.Duration(max(lagMillis, 0)) * time.Millisecond, nil
}

// Prune deletes done changes, oldest first, and the graves of removed
// rows as old: past keep no cached copy of theirs is left.
func (s *Session) Prune(ctx context.Context, keep time.Duration, limit int) (int64, error) {
	rows, err := s.db.Query(ctx, `DELETE FROM listing_changes WHERE seq IN (
			SELECT seq FROM listing_changes WHERE done_at IS NOT NULL AND changed_at < `+s.now+` - $1
			ORDER BY seq LIMIT $2)
		RETURNING seq`, keep.Milliseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("prune changes: %w", err)
	}
	var n int64
	for rows.Next() {
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("prune changes: %w", err)
	}
	if err := s.db.Exec(ctx, `DELETE FROM listing_graves WHERE buried_at < `+s.now+` - $1`, keep.Milliseconds()); err != nil {
		return 0, fmt.Errorf("prune graves: %w", err)
	}
	return n, nil
}

// inList returns "$k+1, $k+2, …" for vals and the values as arguments.
func inList(vals []int64, k int) (string, []any) {
	var b strings.Builder
	args := make([]any, len(vals))
	for i, v := range vals {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(k+i+1))
		args[i] = v
	}
	return b.String(), args
}

// columns are the listing columns that a writer other than the gateway may
// change without touching the document: they win over it.
type columns struct {
	id, firmID, no, firmUserID, revision int64
	active                               bool
	// modified is the row's modified_at, where read.
	modified int64
}

// listing decodes doc and lays the columns over it.
func (c columns) listing(doc []byte) (upstream.Listing, error) {
	var l upstream.Listing
	if err := json.Unmarshal(doc, &l); err != nil {
		return upstream.Listing{}, fmt.Errorf("decode document: %w", err)
	}
	l.ID, l.FirmID, l.No, l.FirmUserID, l.IsActive, l.Revision = c.id, c.firmID, c.no, c.firmUserID, c.active, c.revision
	l.Modified = c.modified
	l.Normalize()
	return l, nil
}
