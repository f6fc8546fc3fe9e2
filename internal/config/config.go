// Package config owns the gateway's whole configuration: the Config type
// composed of the components' own parts, its defaults, loading it from
// configs/gateway.yaml and GATEWAY_* variables, its checks, and the help
// text that lists every setting. A Config is a value: it is loaded once
// and passed down by copy, so it needs no locking.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/caarlos0/env/v11"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.yaml.in/yaml/v3"

	"github.com/realty-gateway/gateway/breaker"
	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/cdn"
	"github.com/realty-gateway/gateway/feed"
	"github.com/realty-gateway/gateway/gateway"
	"github.com/realty-gateway/gateway/internal/settings"
	"github.com/realty-gateway/gateway/revocation"
	"github.com/realty-gateway/gateway/signing"
	"github.com/realty-gateway/gateway/upstream"
)

const (
	defaultFile = "configs/gateway.yaml"
	// EnvPrefix starts the name of every variable the gateway reads.
	EnvPrefix = "GATEWAY_"
)

// Config is the whole configuration: configs/gateway.yaml (or the file
// GATEWAY_CONFIG names), then GATEWAY_* environment variables over it. It
// is parsed once in main and passed down as values. Each part is defined,
// with its defaults and checks, next to the code that uses it.
type Config struct {
	Server  Server         `yaml:"server"`
	Store   Store          `yaml:"store"`
	Breaker breaker.Config `yaml:"breaker" envPrefix:"BREAKER_"`
	Redis   Redis          `yaml:"redis" envPrefix:"REDIS_"`
	Cache   cache.Config   `yaml:"cache"`
	HTTP    gateway.Config `yaml:"http"`
	Purge   cdn.Config     `yaml:"purge" envPrefix:"CDN_"`
	Feed    feed.Config    `yaml:"feed"`
	// Revocation is the token revocations' part.
	Revocation revocation.Config `yaml:"revocation"`
	Tracing    Tracing           `yaml:"tracing"`
}

// Defaults are the values used when neither the file nor the environment
// sets one; configs/gateway.yaml repeats them for reference.
func Defaults() Config {
	cfg := Config{
		Server:  defaultServer(),
		Store:   defaultStore(),
		Breaker: breaker.DefaultConfig(),
		Redis:   defaultRedis(),
		Cache:   cache.DefaultConfig(),
		HTTP:    gateway.DefaultConfig(),
		Purge:   cdn.DefaultConfig(),
		Feed:    feed.DefaultConfig(),

		Revocation: revocation.DefaultConfig(),
	}
	return cfg
}

// Load reads the file, then the environment, then checks the result.
func Load(environ map[string]string) (Config, error) {
	cfg := Defaults()
	path := environ["GATEWAY_CONFIG"]
	if path == "" {
		path = defaultFile
	}
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
			return cfg, fmt.Errorf("config %s: %w", path, err)
		}
	case errors.Is(err, os.ErrNotExist) && environ["GATEWAY_CONFIG"] == "":
		// The embedded defaults stand.
	default:
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	if _, set := environ["GATEWAY_LOCAL_CACHE_SIZE"]; set {
		return cfg, errors.New("GATEWAY_LOCAL_CACHE_SIZE was removed: the local tier is bounded by bytes, GATEWAY_LOCAL_CACHE_BYTES")
	}
	if err := env.ParseWithOptions(&cfg, env.Options{Prefix: EnvPrefix, Environment: environ}); err != nil {
		return cfg, fmt.Errorf("config environment: %s: %w", strings.Join(unparsable(environ), ", "), err)
	}
	if err := cfg.Tracing.fromEnviron(environ); err != nil {
		return cfg, fmt.Errorf("config environment: %w", err)
	}
	return cfg, cfg.validate()
}

// unparsable names the variables of environ that do not parse on their
// own: the library's errors name Go fields, an operator sets variables.
func unparsable(environ map[string]string) []string {
	var bad []string
	for _, s := range settings.Walk(Config{}, EnvPrefix) {
		value, given := environ[s.Env]
		if !given {
			continue
		}
		var probe Config
		if env.ParseWithOptions(&probe, env.Options{Prefix: EnvPrefix, Environment: map[string]string{s.Env: value}}) != nil {
			bad = append(bad, s.Env)
		}
	}
	return bad
}

// GatewayConfig is the gateway's part, with what it takes from the other
// parts' settings: where http.cdn.controlHeader names no header, the one
// that the purged CDN reads. Fastly reads Surrogate-Control (and strips
// it); Cloudflare, Varnish with the shipped VCL, and RFC 9213's CDNs read
// CDN-Cache-Control.
func (c Config) GatewayConfig() gateway.Config {
	g := c.HTTP
	if g.CDN.ControlHeader == "" {
		g.CDN.ControlHeader = gateway.CDNCacheControl
		if c.Purge.Format == cdn.FormatFastly {
			g.CDN.ControlHeader = gateway.SurrogateControl
		}
	}
	return g
}

// CacheDeps are what the listing cache over src takes from the store's
// and Redis's settings.
func (c Config) CacheDeps(src cache.Source, tp trace.TracerProvider, log *slog.Logger) cache.Deps {
	return cache.Deps{Source: src, Log: log, Tracer: tp, Prefix: c.Redis.Prefix, LoadTimeout: c.Store.Timeout + 3*c.Redis.Timeout}
}

// PurgerDeps are what the CDN purger takes from the other parts' settings:
// a purge is retried until the copy it targets has expired.
func (c Config) PurgerDeps(log *slog.Logger) cdn.Deps {
	return cdn.Deps{GiveUpAfter: c.HTTP.CDN.SMaxAge + c.HTTP.CDN.StaleWhileRevalidate + c.HTTP.CDN.StaleIfError,
		StoreTimeout: c.Store.Timeout, Log: log}
}

// SigningConfig is the token keys' part: the key files or the data
// directory's key folder, and the algorithm that signs. Unset, that is
// HS256 where a secret or keys are configured (a deployment from before
// asymmetric keys goes on as it was), else ES256: the asymmetric algorithm
// that most verifiers take (a CDN's JWT validation among them).
func (c Config) SigningConfig() signing.Config {
	jwt := c.HTTP.JWT
	alg := jwt.Algorithm
	switch {
	case alg != "":
	case jwt.Keys != "" || jwt.Secret != "":
		alg = signing.AlgHS256
	default:
		alg = upstream.SigningAlgES256
	}
	return signing.Config{Algorithm: alg, KeyFiles: jwt.KeyFiles,
		KeyDir: filepath.Join(c.Server.DataDir, "signing-keys"), Poll: jwt.KeysPoll}
}

// KeeperDeps are what the revocations' keeper takes from the other parts'
// settings: a revocation lasts as long as the longest token.
func (c Config) KeeperDeps(set *revocation.Set, src revocation.Source, rdb redis.UniversalClient, log *slog.Logger) revocation.Deps {
	return revocation.Deps{Set: set, Source: src, Redis: rdb, Prefix: c.Redis.Prefix, Horizon: c.HTTP.JWT.TokenTTL + c.HTTP.JWT.Leeway,
		StoreTimeout: c.Store.Timeout, RedisTimeout: c.Redis.Timeout, Log: log}
}

func (c Config) validate() error {
	var errs []error
	if c.Redis.URL == "" && c.Cache.LocalBytes == 0 {
		errs = append(errs, errors.New("cache.localBytes must be positive without Redis: it is the only cache"))
	}
	return errors.Join(append(errs, c.Server.validate(), c.Store.validate(), c.Breaker.Validate(), c.Redis.validate(),
		c.Cache.Validate(), c.HTTP.Validate(), c.Purge.Validate(), c.Feed.Validate(), c.Revocation.Validate(), c.Tracing.validate())...)
}

// LogValue lists every setting by its YAML path, with secrets masked.
func (c Config) LogValue() slog.Value { return settings.LogValue(c) }
