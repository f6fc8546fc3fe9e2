package postgres_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/internal/testenv"
)

// TestAdoptReplaysInShortStatements: a new Redis's replay of a window of
// many changes (an import's) marks them in statements of at most 2,000
// rows, each within the serving statement_timeout; a replay of 200,000
// in one statement outlasted it on every try, and the new Redis was never
// adopted. A statement trigger with a transition table counts the rows
// of each UPDATE of listing_changes.
func TestAdoptReplaysInShortStatements(t *testing.T) {
	ctx := context.Background()
	url := testenv.PostgresURL(t)
	_, sess := consumer(t, url)
	conn := connect(t, url)
	const changes = 4500
	execAll(t, url,
		`INSERT INTO listing_changes (listing_id, firm_id, no, revision, visible_before, visible_after, deleted, changed_at, applied_at, done_at)
		 SELECT i, 1, i, 1, true, true, false, m, m, m
		 FROM generate_series(1, `+strconv.Itoa(changes)+`) i, (SELECT (extract(epoch FROM now()) * 1000)::bigint m) now`,
		`CREATE TABLE update_sizes (n bigint NOT NULL)`,
		`CREATE FUNCTION count_update() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN INSERT INTO update_sizes SELECT count(*) FROM changed; RETURN NULL; END $$`,
		`CREATE TRIGGER count_update AFTER UPDATE ON listing_changes
		 REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION count_update()`,
	)

	if n, err := sess.Adopt(ctx, "redis-2", time.Hour); err != nil || n != changes {
		t.Fatalf("Adopt = %d, %v; want all %d changes replayed", n, err, changes)
	}

	var largest, sum int64
	if err := conn.QueryRow(ctx, `SELECT COALESCE(max(n), 0), COALESCE(sum(n), 0) FROM update_sizes`).Scan(&largest, &sum); err != nil {
		t.Fatal(err)
	}
	if largest > 2000 || sum != changes {
		t.Fatalf("replay's UPDATEs: largest %d rows, %d in all; want at most 2000 each, %d in all", largest, sum, changes)
	}
	var unapplied int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM listing_changes WHERE applied_at IS NULL AND replayed`).Scan(&unapplied); err != nil {
		t.Fatal(err)
	}
	if unapplied != changes {
		t.Fatalf("%d changes marked for replay; want %d", unapplied, changes)
	}
}
