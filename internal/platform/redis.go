package platform

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/config"
)

// OpenRedis returns nil when no Redis is configured. The client is a
// *redis.Client (single, sentinel) or a *redis.ClusterClient; everything
// that uses it takes a redis.UniversalClient. A client retries a command
// once; each of its waits is bounded by cfg.Timeout.
func OpenRedis(cfg config.Redis) (redis.UniversalClient, error) {
	if cfg.URL == "" {
		return nil, nil
	}
	url := string(cfg.URL)
	switch cfg.Mode {
	case config.RedisCluster:
		o, err := redis.ParseClusterURL(url)
		if err != nil {
			return nil, errors.New("redis.url is not a valid cluster URL (redis://host1:port1?addr=host2:port2)")
		}
		bound(cfg.Timeout, &o.ContextTimeoutEnabled, &o.MaxRetries, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout)
		return redis.NewClusterClient(o), nil
	case config.RedisSentinel:
		o, err := redis.ParseFailoverURL(url)
		if err != nil {
			return nil, errors.New("redis.url is not a valid sentinel URL (redis://sentinel:26379?master_name=NAME&addr=sentinel2:26379)")
		}
		if o.MasterName == "" {
			return nil, errors.New("redis.url names no master: add ?master_name=NAME")
		}
		bound(cfg.Timeout, &o.ContextTimeoutEnabled, &o.MaxRetries, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout)
		return redis.NewFailoverClient(o), nil
	default:
		o, err := redis.ParseURL(url)
		if err != nil {
			return nil, errors.New("redis.url is not a valid redis:// URL")
		}
		bound(cfg.Timeout, &o.ContextTimeoutEnabled, &o.MaxRetries, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout)
		return redis.NewClient(o), nil
	}
}

// bound has a client honour contexts' deadlines, retry once and wait at
// most timeout in each of waits.
func bound(timeout time.Duration, contextTimeout *bool, retries *int, waits ...*time.Duration) {
	*contextTimeout, *retries = true, 1
	for _, w := range waits {
		*w = timeout
	}
}

// RedisLog has the Redis client write its own lines (a failed dial, a
// pool's trouble) through the gateway's JSON log, at warning level.
type RedisLog struct{ Log *slog.Logger }

// Printf logs one line of the client's.
func (l RedisLog) Printf(ctx context.Context, format string, v ...any) {
	l.Log.WarnContext(ctx, "redis client", "msg", fmt.Sprintf(format, v...))
}
