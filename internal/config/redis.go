package config

import (
	"errors"
	"fmt"
	"time"

	"github.com/realty-gateway/gateway/internal/settings"
)

// Redis deployment shapes that redis.url can name.
const (
	RedisSingle   = "single"
	RedisCluster  = "cluster"
	RedisSentinel = "sentinel"
)

// Redis names the shared Redis, if any.
type Redis struct {
	Mode    string        `yaml:"mode" env:"MODE" help:"single, cluster or sentinel: how redis.url is read (see docs/operating.md, Redis beyond one node)"`
	URL     settings.DSN  `yaml:"url" env:"URL" help:"redis://host:port/db; cluster: redis://h1:p1?addr=h2:p2; sentinel: redis://sentinel:26379?master_name=M&addr=s2:26379; empty caches in process"`
	Prefix  string        `yaml:"prefix" env:"PREFIX" help:"put before every Redis key (tests use it)"`
	Timeout time.Duration `yaml:"timeout" env:"TIMEOUT" help:"deadline of one Redis operation (dial, read, write, pool wait)"`
}

func defaultRedis() Redis {
	return Redis{Mode: RedisSingle, Timeout: 100 * time.Millisecond}
}

func (c Redis) validate() error {
	switch c.Mode {
	case RedisSingle, RedisCluster, RedisSentinel:
	default:
		return fmt.Errorf("redis.mode %q is not single, cluster or sentinel", c.Mode)
	}
	if c.Timeout <= 0 {
		return errors.New("redis.timeout must be positive")
	}
	return nil
}
