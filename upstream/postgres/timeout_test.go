package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/upstream/internal/sqlstore"
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

// TestSchemaStepsOutlastTheStatementTimeout: a schema step longer than the
// serving statement_timeout is applied, not cancelled.
func TestSchemaStepsOutlastTheStatementTimeout(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "50"
	ctx := context.Background()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `SELECT pg_sleep(0.3)`); err == nil {
		t.Fatal("a 300 ms statement outside the schema's steps was not cancelled by the 50 ms statement_timeout")
	}
	db := database{Querier: sqlstore.Conn(pool.QueryRow, pool.Exec), pool: pool}
	schema := sqlstore.Schema{Steps: []string{`SELECT pg_sleep(0.3)`}, Version: lockedVersion, SetVersion: setVersion}
	if err := sqlstore.Migrate(ctx, db, schema); err != nil {
		t.Fatalf("a 300 ms schema step under a 50 ms statement_timeout: %v", err)
	}
	var version int
	if err := pool.QueryRow(ctx, `SELECT MAX(version) FROM schema_version`).Scan(&version); err != nil || version != 1 {
		t.Fatalf("schema version %d (%v); want 1", version, err)
	}
}
