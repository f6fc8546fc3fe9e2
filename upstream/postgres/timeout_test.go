package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/upstream/storetest"
)

func TestStatementTimeout(t *testing.T) {
	url := testenv.PostgresURL(t)
	s, err := Open(context.Background(), url, Options{StatementTimeout: 100 * time.Millisecond})
	s = storetest.Opened(t, s, err)

	// A sleep far longer than the test's patience: returning within it,
	// cancelled, is the statement timeout's work, however busy the machine.
	const sleep = time.Hour
	testenv.NeedPatienceBelow(t, sleep, "the statement's sleep")
	start := time.Now()
	_, err = s.pool.Exec(context.Background(), `SELECT pg_sleep($1)`, sleep.Seconds())
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "57014" { // query_canceled
		t.Fatalf("pg_sleep error = %v; want query_canceled (57014)", err)
	}
	if elapsed := time.Since(start); elapsed > testenv.Patience() {
		t.Fatalf("pg_sleep took %v; want it cancelled by the 100ms statement timeout", elapsed)
	}
}
