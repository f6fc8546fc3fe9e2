package platform

import (
	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/internal/config"
)

// NewCache returns the listing cache of deps: on Redis when rdb is set,
// else in process.
func NewCache(cfg config.Config, rdb redis.UniversalClient, deps cache.Deps, opts ...cache.Option) (*cache.Cache, error) {
	if rdb == nil {
		deps.Log.Info("no Redis configured; caching in process")
		return cache.NewLocal(cfg.Cache, deps, opts...)
	}
	return cache.NewRedis(rdb, cfg.Redis.Timeout, cfg.Cache, deps, opts...)
}
