package platform

import (
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/internal/config"
)

// NewCache returns the listing cache over src: on Redis when rdb is set,
// else in process.
func NewCache(cfg config.Config, src cache.Source, rdb redis.UniversalClient, log *slog.Logger, opts ...cache.Option) *cache.Cache {
	if rdb == nil {
		log.Info("no Redis configured; caching in process")
		return cache.NewLocal(src, cfg.Cache, log, opts...)
	}
	return cache.NewRedis(src, rdb, cfg.Redis.Timeout, cfg.Cache, log, opts...)
}
