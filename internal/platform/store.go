package platform

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/realty-gateway/gateway/internal/config"
	"github.com/realty-gateway/gateway/upstream"
	"github.com/realty-gateway/gateway/upstream/postgres"
	"github.com/realty-gateway/gateway/upstream/sqlite"
)

// OpenStore opens the engine named by the store URL. It reports whether it
// is the embedded SQLite store, the only one that is ever seeded.
// A tracer, when set, sees every PostgreSQL query.
func OpenStore(ctx context.Context, cfg config.Store, tracer pgx.QueryTracer) (upstream.Store, bool, error) {
	u := string(cfg.URL)
	switch {
	case strings.HasPrefix(u, "sqlite:"):
		s, err := sqlite.Open(ctx, strings.TrimPrefix(u, "sqlite:"))
		if err != nil {
			return nil, false, err
		}
		return s, true, nil
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		s, err := postgres.Open(ctx, u, postgres.Options{MaxConns: cfg.PostgresMaxConns, StatementTimeout: cfg.Timeout, Tracer: tracer})
		if err != nil {
			return nil, false, err
		}
		return s, false, nil
	default:
		return nil, false, errors.New("store.url must start with sqlite: or postgres://")
	}
}
