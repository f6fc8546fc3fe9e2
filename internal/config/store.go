package config

import (
	"errors"
	"time"

	"github.com/realty-gateway/gateway/breaker"
	"github.com/realty-gateway/gateway/internal/settings"
)

// Store names the listing store and bounds each call to it.
type Store struct {
	URL              settings.DSN  `yaml:"url" env:"STORE_URL" help:"postgres://… or sqlite:PATH"`
	Timeout          time.Duration `yaml:"timeout" env:"STORE_TIMEOUT" help:"deadline of one store call; also PostgreSQL's statement_timeout"`
	Concurrency      int           `yaml:"concurrency" env:"STORE_CONCURRENCY" help:"bulkhead: store calls at once"`
	PostgresMaxConns int32         `yaml:"postgresMaxConns" env:"POSTGRES_MAX_CONNS" help:"pgx pool size"`
}

func defaultStore() Store {
	return Store{URL: "sqlite:data/gateway.db", Timeout: 2 * time.Second, Concurrency: 32, PostgresMaxConns: 16}
}

func (c Store) validate() error {
	var errs []error
	if c.Timeout <= 0 {
		errs = append(errs, errors.New("store.timeout must be positive"))
	}
	if c.Concurrency <= 0 || c.PostgresMaxConns <= 0 {
		errs = append(errs, errors.New("store.concurrency and store.postgresMaxConns must be positive"))
	}
	return errors.Join(errs...)
}

// Limits bound each guarded store call.
func (c Store) Limits() breaker.Limits {
	return breaker.Limits{CallTimeout: c.Timeout, MaxConcurrent: c.Concurrency}
}
