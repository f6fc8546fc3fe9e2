package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/internal/settings"
)

// Redis deployment shapes that redis.url can name.
const (
	redisSingle   = "single"
	redisCluster  = "cluster"
	redisSentinel = "sentinel"
)

// redisConfig names the shared Redis, if any.
type redisConfig struct {
	Mode    string        `yaml:"mode" env:"MODE" help:"single, cluster or sentinel: how redis.url is read (see docs/operating.md, Redis beyond one node)"`
	URL     settings.DSN  `yaml:"url" env:"URL" help:"redis://host:port/db; cluster: redis://h1:p1?addr=h2:p2; sentinel: redis://sentinel:26379?master_name=M&addr=s2:26379; empty caches in process"`
	Prefix  string        `yaml:"prefix" env:"PREFIX" help:"put before every Redis key (tests use it)"`
	Timeout time.Duration `yaml:"timeout" env:"TIMEOUT" help:"deadline of one Redis operation (dial, read, write, pool wait)"`
}

func defaultRedisConfig() redisConfig {
	return redisConfig{Mode: redisSingle, Timeout: 100 * time.Millisecond}
}

func (c redisConfig) validate() error {
	switch c.Mode {
	case redisSingle, redisCluster, redisSentinel:
	default:
		return fmt.Errorf("redis.mode %q is not single, cluster or sentinel", c.Mode)
	}
	if c.Timeout <= 0 {
		return errors.New("redis.timeout must be positive")
	}
	return nil
}

// openRedis returns nil when no Redis is configured. The client is a
// *redis.Client (single, sentinel) or a *redis.ClusterClient; everything
// that uses it takes a redis.UniversalClient. A client retries a command
// once; each of its waits is bounded by cfg.Timeout.
func openRedis(cfg redisConfig) (redis.UniversalClient, error) {
	if cfg.URL == "" {
		return nil, nil
	}
	url := string(cfg.URL)
	switch cfg.Mode {
	case redisCluster:
		o, err := redis.ParseClusterURL(url)
		if err != nil {
			return nil, errors.New("redis.url is not a valid cluster URL (redis://host1:port1?addr=host2:port2)")
		}
		cfg.bound(&o.ContextTimeoutEnabled, &o.MaxRetries, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout)
		return redis.NewClusterClient(o), nil
	case redisSentinel:
		o, err := redis.ParseFailoverURL(url)
		if err != nil {
			return nil, errors.New("redis.url is not a valid sentinel URL (redis://sentinel:26379?master_name=NAME&addr=sentinel2:26379)")
		}
		if o.MasterName == "" {
			return nil, errors.New("redis.url names no master: add ?master_name=NAME")
		}
		cfg.bound(&o.ContextTimeoutEnabled, &o.MaxRetries, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout)
		return redis.NewFailoverClient(o), nil
	default:
		o, err := redis.ParseURL(url)
		if err != nil {
			return nil, errors.New("redis.url is not a valid redis:// URL")
		}
		cfg.bound(&o.ContextTimeoutEnabled, &o.MaxRetries, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout)
		return redis.NewClient(o), nil
	}
}

// bound has a client honour contexts' deadlines, retry once and wait at
// most c.Timeout in each of waits.
func (c redisConfig) bound(contextTimeout *bool, retries *int, waits ...*time.Duration) {
	*contextTimeout, *retries = true, 1
	for _, w := range waits {
		*w = c.Timeout
	}
}

// newCache returns the listing cache over src: on Redis when rdb is set,
// else in process.
func newCache(cfg config, src cache.Source, rdb redis.UniversalClient, log *slog.Logger, opts ...cache.Option) *cache.Cache {
	if rdb == nil {
		log.Info("no Redis configured; caching in process")
		return cache.NewLocal(src, cfg.Cache, log, opts...)
	}
	return cache.NewRedis(src, rdb, cfg.Redis.Timeout, cfg.Cache, log, opts...)
}

// redisLog has the Redis client write its own lines (a failed dial, a
// pool's trouble) through the gateway's JSON log, at warning level.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis client", "msg", fmt.Sprintf(format, v...))
}
