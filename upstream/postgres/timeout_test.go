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

	start := time.Now()
	_, err = s.pool.Exec(context.Background(), `SELECT pg_sleep(2)`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "57014" { // query_canceled
		t.Fatalf("pg_sleep(2) error = %v; want query_canceled (57014)", err)
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Fatalf("pg_sleep(2) took %v; want it cancelled after about 100ms", elapsed)
	}
}
