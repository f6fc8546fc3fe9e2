package main

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/realty-gateway/gateway/breaker"
	"github.com/realty-gateway/gateway/internal/settings"
	"github.com/realty-gateway/gateway/upstream"
	"github.com/realty-gateway/gateway/upstream/postgres"
	"github.com/realty-gateway/gateway/upstream/sqlite"
)

// storeConfig names the listing store and bounds each call to it.
type storeConfig struct {
	URL              settings.DSN  `yaml:"url" env:"STORE_URL" help:"postgres://… or sqlite:PATH"`
	Timeout          time.Duration `yaml:"timeout" env:"STORE_TIMEOUT" help:"deadline of one store call; also PostgreSQL's statement_timeout"`
	Concurrency      int           `yaml:"concurrency" env:"STORE_CONCURRENCY" help:"bulkhead: store calls at once"`
	PostgresMaxConns int32         `yaml:"postgresMaxConns" env:"POSTGRES_MAX_CONNS" help:"pgx pool size"`
}

func defaultStoreConfig() storeConfig {
	return storeConfig{URL: "sqlite:data/gateway.db", Timeout: 2 * time.Second, Concurrency: 32, PostgresMaxConns: 16}
}

func (c storeConfig) validate() error {
	var errs []error
	if c.Timeout <= 0 {
		errs = append(errs, errors.New("store.timeout must be positive"))
	}
	if c.Concurrency <= 0 || c.PostgresMaxConns <= 0 {
		errs = append(errs, errors.New("store.concurrency and store.postgresMaxConns must be positive"))
	}
	return errors.Join(errs...)
}

// limits bound each guarded store call.
func (c storeConfig) limits() breaker.Limits {
	return breaker.Limits{CallTimeout: c.Timeout, MaxConcurrent: c.Concurrency}
}

// openStore opens the engine named by the store URL. It reports whether it
// is the embedded SQLite store, the only one that is ever seeded.
// A tracer, when set, sees every PostgreSQL query.
func openStore(ctx context.Context, cfg storeConfig, tracer pgx.QueryTracer) (upstream.Store, bool, error) {
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
