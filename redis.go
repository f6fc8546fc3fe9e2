package main

import (
	"errors"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/internal/settings"
)

// redisConfig names the shared Redis, if any.
type redisConfig struct {
	URL     settings.DSN  `yaml:"url" env:"URL" help:"redis://host:port/db; empty caches in process"`
	Prefix  string        `yaml:"prefix" env:"PREFIX" help:"put before every Redis key (tests use it)"`
	Timeout time.Duration `yaml:"timeout" env:"TIMEOUT" help:"deadline of one Redis operation (dial, read, write, pool wait)"`
}

func defaultRedisConfig() redisConfig { return redisConfig{Timeout: 100 * time.Millisecond} }

func (c redisConfig) validate() error {
	if c.Timeout <= 0 {
		return errors.New("redis.timeout must be positive")
	}
	return nil
}

// openRedis returns nil when no Redis is configured.
func openRedis(cfg redisConfig) (*redis.Client, error) {
	if cfg.URL == "" {
		return nil, nil
	}
	opts, err := redis.ParseURL(string(cfg.URL))
	if err != nil {
		return nil, errors.New("redis.url is not a valid redis:// URL")
	}
	opts.ContextTimeoutEnabled = true
	opts.DialTimeout = cfg.Timeout
	opts.ReadTimeout = cfg.Timeout
	opts.WriteTimeout = cfg.Timeout
	opts.PoolTimeout = cfg.Timeout
	opts.MaxRetries = 1
	return redis.NewClient(opts), nil
}

// newCache returns the listing cache over src: on Redis when rdb is set,
// else in process.
func newCache(cfg config, src cache.Source, rdb *redis.Client, log *slog.Logger) *cache.Cache {
	if rdb == nil {
		log.Info("no Redis configured; caching in process")
		return cache.NewLocal(src, cfg.Cache, log)
	}
	return cache.NewRedis(src, rdb, cfg.Redis.Timeout, cfg.Cache, log)
}
