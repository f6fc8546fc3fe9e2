package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/upstream/storetest"
)

// TestReadsSurviveTerminatedConnections: the server ends every session of
// the database (pg_terminate_backend, as a failover or an operator does);
// the next reads are answered, not failed.
func TestReadsSurviveTerminatedConnections(t *testing.T) {
	ctx := context.Background()
	url := testenv.PostgresURL(t)
	s, err := Open(ctx, url, Options{MaxConns: 4})
	s = storetest.Opened(t, s, err)
	firm, err := s.AddFirm(ctx, "f", []byte("digest"))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	storetest.CloseAtEnd(t, "admin connection", func() error { return admin.Close(ctx) })

	for round := range 3 {
		// Warm every pooled connection, then end them all.
		for range 4 {
			if _, err := s.FirmByKeyDigest(ctx, []byte("digest")); err != nil {
				t.Fatal(err)
			}
		}
		var ended int
		if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&ended); err != nil || ended == 0 {
			t.Fatalf("round %d: terminated %d sessions (err %v)", round, ended, err)
		}
		got, err := s.FirmByKeyDigest(ctx, []byte("digest"))
		if err != nil || got.ID != firm.ID {
			t.Fatalf("round %d: read after termination: %v", round, err)
		}
	}
}
