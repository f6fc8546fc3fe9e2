// Command gateway is the caching edge gateway of the listing API. main only
// wires the parts: config, logger, store, breaker, cache, gateway. Its
// subcommands administer firms, users and listings with the same
// configuration.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/gateway"
	"github.com/realty-gateway/gateway/ratelimit"
	"github.com/realty-gateway/gateway/upstream"
	"github.com/realty-gateway/gateway/upstream/postgres"
	"github.com/realty-gateway/gateway/upstream/sqlite"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], env.ToMap(os.Environ()), os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  gateway [serve]
  gateway firm add --name NAME
  gateway user add --firm N --email E [--password P]
  gateway listing import FILE|-`

func run(ctx context.Context, args []string, environ map[string]string, stdin io.Reader, stdout, stderr io.Writer) error {
	cfg, err := loadConfig(environ)
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg.LogLevel)
	if len(args) == 0 || len(args) == 1 && args[0] == "serve" {
		return serve(ctx, cfg, log)
	}
	if len(args) < 2 {
		return errors.New(usage)
	}
	switch args[0] + " " + args[1] {
	case "firm add":
		return addFirm(ctx, cfg, args[2:], stdout)
	case "user add":
		return addUser(ctx, cfg, args[2:], stdout)
	case "listing import":
		return importListings(ctx, cfg, log, args[2:], stdin, stdout)
	default:
		return errors.New(usage)
	}
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

// openStore opens the engine named by the store URL. It reports whether it
// is the embedded SQLite store, the only one that is ever seeded.
func openStore(ctx context.Context, cfg config) (upstream.Store, bool, error) {
	u := string(cfg.StoreURL)
	switch {
	case strings.HasPrefix(u, "sqlite:"):
		s, err := sqlite.Open(ctx, strings.TrimPrefix(u, "sqlite:"))
		if err != nil {
			return nil, false, err
		}
		return s, true, nil
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		s, err := postgres.Open(ctx, u, postgres.Options{MaxConns: cfg.PostgresMaxConns, StatementTimeout: cfg.StoreTimeout})
		if err != nil {
			return nil, false, err
		}
		return s, false, nil
	default:
		return nil, false, errors.New("storeURL must start with sqlite: or postgres://")
	}
}

// openRedis returns nil when no Redis is configured.
func openRedis(cfg config) (*redis.Client, error) {
	if cfg.RedisURL == "" {
		return nil, nil
	}
	opts, err := redis.ParseURL(string(cfg.RedisURL))
	if err != nil {
		return nil, errors.New("redisURL is not a valid redis:// URL")
	}
	opts.ContextTimeoutEnabled = true
	opts.DialTimeout = cfg.RedisTimeout
	opts.ReadTimeout = cfg.RedisTimeout
	opts.WriteTimeout = cfg.RedisTimeout
	opts.PoolTimeout = cfg.RedisTimeout
	opts.MaxRetries = 1
	return redis.NewClient(opts), nil
}

// newCache returns the listing cache over src: on Redis when rdb is set,
// else in process.
func newCache(cfg config, src cache.Source, rdb *redis.Client, log *slog.Logger) *cache.Cache {
	if rdb == nil {
		log.Info("no Redis configured; caching in process")
		return cache.NewLocal(src, cfg.LocalCacheSize, cacheConfig(cfg), log)
	}
	return cache.NewRedis(src, rdb, cfg.RedisTimeout, cacheConfig(cfg), log)
}

func cacheConfig(cfg config) cache.Config {
	return cache.Config{
		Fresh:       cfg.CacheTTL,
		Stale:       cfg.CacheStale,
		Negative:    cfg.NegativeTTL,
		LoadTimeout: cfg.StoreTimeout + 3*cfg.RedisTimeout,
		Prefix:      cfg.RedisPrefix,
	}
}

func serve(ctx context.Context, cfg config, log *slog.Logger) error {
	log.Info("starting gateway", "config", cfg)
	keys, err := cfg.signingKeys(log)
	if err != nil {
		return err
	}
	store, embedded, err := openStore(ctx, cfg)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer store.Close()
	if embedded {
		if err := seedDemo(ctx, store, log); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	guarded := upstream.NewGuarded(store, upstream.BreakerConfig{
		CallTimeout:    cfg.StoreTimeout,
		MaxConcurrent:  cfg.StoreConcurrency,
		Window:         cfg.BreakerWindow,
		Bucket:         cfg.BreakerBucket,
		MinRequests:    cfg.BreakerMinRequests,
		FailureRatio:   cfg.BreakerFailureRatio,
		OpenFor:        cfg.BreakerOpenFor,
		HalfOpenProbes: cfg.BreakerProbes,
	}, log)

	rdb, err := openRedis(cfg)
	if err != nil {
		return err
	}
	if rdb != nil {
		defer rdb.Close()
	}
	listings := newCache(cfg, guarded, rdb, log)
	// Background work outlives the signal: it stops after the drain, so
	// that the last requests' repairs and purges are not lost.
	background, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	var backgroundDone sync.WaitGroup
	defer backgroundDone.Wait()
	defer stopBackground()
	backgroundDone.Go(func() { listings.Repair(background, time.Second) })
	var purger gateway.Purger = gateway.NoPurge{}
	if cfg.CDNPurgeURL != "" {
		p := upstream.NewPurger(upstream.PurgeConfig{
			URLTemplate: string(cfg.CDNPurgeURL), Header: string(cfg.CDNPurgeHeader), Timeout: cfg.CDNPurgeTimeout, Queue: 4096,
		}, log)
		backgroundDone.Go(func() { p.Run(background) })
		purger = p
	}

	proxies, err := cfg.trustedProxies()
	if err != nil {
		return err
	}
	limiter := ratelimit.New(rdb, cfg.RedisPrefix, cfg.RedisTimeout, log)
	srv, err := gateway.New(gateway.Config{
		Issuer:          cfg.JWTIssuer,
		Audience:        cfg.JWTAudience,
		Keys:            keys,
		TokenTTL:        cfg.TokenTTL,
		Leeway:          cfg.JWTLeeway,
		RequestTimeout:  cfg.RequestTimeout,
		ReadTimeout:     cfg.ReadTimeout,
		WriteTimeout:    cfg.WriteTimeout,
		IdleTimeout:     cfg.IdleTimeout,
		BodyLimit:       cfg.BodyLimit,
		HeaderLimit:     cfg.HeaderLimit,
		RetryAfter:      cfg.BreakerOpenFor,
		HashConcurrency: cfg.HashConcurrency,
		HashWait:        cfg.HashWait,
		MaxAge:          cfg.HTTPMaxAge,
		CDN: gateway.CDN{
			Enabled:              cfg.CDNMode,
			SMaxAge:              cfg.CDNSMaxAge,
			StaleWhileRevalidate: cfg.CDNStaleWhileRevalidate,
			StaleIfError:         cfg.CDNStaleIfError,
		},
		Limits: gateway.LoginLimits{
			AccountFailures: ratelimit.Limit{Count: cfg.LoginAccountFailures, Period: cfg.LoginLimitPeriod},
			IP:              ratelimit.Limit{Count: cfg.LoginIPAttempts, Period: cfg.LoginLimitPeriod},
			Key:             ratelimit.Limit{Count: cfg.LoginKeyAttempts, Period: cfg.LoginLimitPeriod},
			UnknownKeys:     ratelimit.Limit{Count: cfg.LoginUnknownKeys, Period: cfg.LoginLimitPeriod},
			IPv6Prefix:      cfg.LoginIPv6Prefix,
		},
		TrustedProxies: proxies,
	}, listings, guarded, limiter, purger, log)
	if err != nil {
		return err
	}
	app := srv.App()

	var ready atomic.Bool
	admin := &http.Server{
		Addr:              cfg.AdminAddr,
		Handler:           adminHandler(&ready, listings, guarded, srv),
		ReadHeaderTimeout: time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      5 * time.Second,
	}
	errc := make(chan error, 2)
	go func() { errc <- app.Listen(cfg.Addr) }()
	go func() {
		if err := admin.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("admin listener: %w", err)
		}
	}()
	ready.Store(true)
	log.Info("gateway listening", "addr", cfg.Addr, "admin", cfg.AdminAddr)

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	ready.Store(false)
	log.Info("shutting down", "delay", cfg.ShutdownDelay.String())
	time.Sleep(cfg.ShutdownDelay)
	shutdownErr := app.ShutdownWithTimeout(cfg.ShutdownTimeout)
	adminCtx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return errors.Join(shutdownErr, admin.Shutdown(adminCtx))
}

// adminHandler serves liveness, readiness and counters on the admin
// address, which is not exposed to clients.
func adminHandler(ready *atomic.Bool, listings *cache.Cache, guarded *upstream.Guarded, srv *gateway.Server) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			Cache       cache.Stats `json:"cache"`
			BreakerOpen bool        `json:"breakerOpen"`
			Panics      uint64      `json:"panics"`
		}{listings.Stats(), guarded.Open(), srv.Panics()})
	})
	return mux
}
