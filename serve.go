package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/cdn"
	"github.com/realty-gateway/gateway/feed"
	"github.com/realty-gateway/gateway/gateway"
	"github.com/realty-gateway/gateway/internal/adminserver"
	"github.com/realty-gateway/gateway/internal/config"
	"github.com/realty-gateway/gateway/internal/demo"
	"github.com/realty-gateway/gateway/internal/platform"
	"github.com/realty-gateway/gateway/metrics"
	"github.com/realty-gateway/gateway/ratelimit"
	"github.com/realty-gateway/gateway/revocation"
	"github.com/realty-gateway/gateway/signing"
	"github.com/realty-gateway/gateway/upstream"
)

// serve runs the gateway until ctx ends, then drains it.
func serve(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	started := time.Now()
	log.Info("starting gateway", "config", cfg)
	platform.SetMemoryLimit(cfg.Cache.LocalBytes, log)
	if err := platform.EnsureJWTSecret(&cfg, log); err != nil {
		return err
	}
	tp, err := platform.OpenTracing(ctx, cfg.Tracing, log)
	if err != nil {
		return err
	}
	var tracer trace.TracerProvider // nil: no spans, at no cost
	if tp != nil {
		defer platform.ShutdownTracing(tp, log)
		tracer = tp
	}
	m := metrics.New()
	p, err := assemble(ctx, cfg, tracer, m, log)
	if err != nil {
		return err
	}
	defer p.close()
	// Background work outlives the signal: it stops after the drain, so
	// that the last requests' repairs and purges are not lost.
	background, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	var backgroundDone sync.WaitGroup
	defer backgroundDone.Wait()
	defer stopBackground()
	backgroundDone.Go(func() { p.listings.Repair(background, time.Second) })
	backgroundDone.Go(func() { p.listings.Run(background) })
	if p.cdnPurger != nil {
		backgroundDone.Go(func() { p.cdnPurger.Run(background) })
	}
	if p.feed != nil {
		backgroundDone.Go(func() { p.feed.Run(background) })
	}
	backgroundDone.Go(func() { p.revocations.Run(background) })
	backgroundDone.Go(func() { p.tokenKeys.Run(background) })
	var draining atomic.Bool
	ready := adminserver.NewReadiness(&draining, started, p.readinessDeps(cfg))
	newMetrics(m, p.listings, p.guarded, p.limiter, p.cdnPurger, p.rdb, p.feed, p.revocations, cfg.Cache.LocalBytes, ready)
	adminSrv := adminserver.New(cfg.Server.AdminAddr, ready, m.Handler(), p.statsSections()...)
	return listen(ctx, cfg.Server, p.srv, adminSrv, &draining, log)
}

// parts are the gateway's components, wired together.
type parts struct {
	store     upstream.Store
	guarded   *upstream.Guarded
	rdb       redis.UniversalClient // nil without Redis
	listings  *cache.Cache
	limiter   *ratelimit.Limiter
	cdnPurger *cdn.Purger // nil without a CDN purge API
	feed      *feed.Consumer
	// revocations keeps the token revocations in force, loaded by
	// assemble: a gateway refuses a revoked token from its first request.
	revocations *revocation.Keeper
	// tokenKeys keeps the fleet's token keys, published and read by
	// assemble: the first token is signed with the fleet's signer.
	tokenKeys *signing.Keyring
	srv       *gateway.Server
}

// assemble opens the store and Redis and builds the gateway on them, with
// every part recording spans of tp's when tp is set, and every store call
// and answer reported to m when m is set.
func assemble(ctx context.Context, cfg config.Config, tp trace.TracerProvider, m *metrics.Metrics, log *slog.Logger) (_ *parts, err error) {
	var (
		observeStore func(op, outcome string, d time.Duration)
		observer     gateway.Observer
	)
	if m != nil {
		observeStore, observer = m.StoreCall, m
		m.StoreOps(upstream.GuardedOps())
	}
	p := &parts{}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if err := p.openStore(ctx, cfg, tp, observeStore, log); err != nil {
		return nil, err
	}
	if err := p.openRedis(cfg.Redis, tp); err != nil {
		return nil, err
	}
	changes, ok := p.store.(upstream.Feed)
	if !ok {
		return nil, errors.New("store: no change feed")
	}
	if err := p.openCache(cfg, changes, tp, log); err != nil {
		return nil, err
	}
	purger, err := p.openFeed(cfg, changes, log)
	if err != nil {
		return nil, err
	}
	if p.limiter, err = ratelimit.New(p.rdb, cfg.Redis.Prefix, cfg.Redis.Timeout, log); err != nil {
		return nil, err
	}
	revoked := revocation.NewSet()
	if p.revocations, err = revocation.NewKeeper(cfg.Revocation, cfg.KeeperDeps(revoked, p.guarded, p.rdb, log)); err != nil {
		return nil, err
	}
	if err := p.revocations.Load(ctx); err != nil {
		return nil, err
	}
	if p.tokenKeys, err = newTokenKeys(ctx, cfg, p.store, log); err != nil {
		return nil, err
	}
	if p.srv, err = gateway.New(cfg.GatewayConfig(), gateway.Deps{Listings: p.listings, Accounts: p.guarded, Limiter: p.limiter, Purger: purger,
		Revoked: revoked, Log: log, Tracer: tp, RetryAfter: cfg.Breaker.OpenFor, CacheTTL: cfg.Cache.Fresh, Observer: observer,
		Keys: p.tokenKeys}); err != nil {
		return nil, err
	}
	return p, nil
}

// newTokenKeys reads this gateway's private keys, publishes them in the
// store and reads the fleet's key set. It reads the store itself, not
// through the breaker: its background reads must not weigh in the
// breaker's judgement of the requests' store calls.
func newTokenKeys(ctx context.Context, cfg config.Config, store signing.Store, log *slog.Logger) (*signing.Keyring, error) {
	hmacs, err := cfg.HTTP.JWT.SigningKeys()
	if err != nil {
		return nil, err
	}
	keys, err := signing.New(cfg.SigningConfig(), signing.Deps{Store: store, HMAC: hmacs, Log: log, StoreTimeout: cfg.Store.Timeout})
	if err != nil {
		return nil, err
	}
	return keys, keys.Start(ctx)
}

// readinessDeps are what /readyz asks of the parts.
func (p *parts) readinessDeps(cfg config.Config) adminserver.ReadinessDeps {
	d := adminserver.ReadinessDeps{RedisTrusted: p.listings.RedisTrusted, BreakerClosed: p.guarded.BreakerClosed,
		PingStore: p.store.Ping, StoreTimeout: cfg.Store.Timeout, RedisTimeout: cfg.Redis.Timeout}
	if p.rdb != nil {
		d.PingRedis = func(ctx context.Context) error { return p.rdb.Ping(ctx).Err() }
	}
	return d
}

// statsSections are /stats: each part's own view, in the order operators
// know.
func (p *parts) statsSections() []adminserver.Section {
	return []adminserver.Section{
		{Name: "cache", Stats: func() any { return p.listings.Stats() }},
		{Name: "breakerOpen", Stats: func() any { return p.guarded.Open() }},
		{Name: "panics", Stats: func() any { return p.srv.Panics() }},
		{Name: "purges", Stats: func() any { return p.cdnPurger.Stats() }},
		{Name: "feed", Stats: func() any { return p.feed.Stats() }},
		{Name: "revocations", Stats: func() any { return p.revocations.Stats() }},
	}
}

// holderName names this process to operators looking at who consumes the
// change feed.
func holderName() string {
	host, err := os.Hostname()
	if err != nil {
		host = "gateway"
	}
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}

// close releases Redis and the store.
func (p *parts) close() {
	if p.rdb != nil {
		p.rdb.Close()
	}
	if p.store != nil {
		p.store.Close()
	}
}

// openStore opens the store, seeds an embedded one with the demo data, and
// puts it behind its breaker, reporting every call to observe where set.
func (p *parts) openStore(ctx context.Context, cfg config.Config, tp trace.TracerProvider,
	observe func(op, outcome string, d time.Duration), log *slog.Logger) error {
	var queryTracer pgx.QueryTracer
	if tp != nil {
		queryTracer = otelpgx.NewTracer(otelpgx.WithTracerProvider(tp))
	}
	store, embedded, err := platform.OpenStore(ctx, cfg.Store, queryTracer)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	p.store = store
	if embedded {
		if err := demo.Seed(ctx, store, cfg.Server.DataDir, log); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	p.guarded, err = upstream.NewGuarded(store, cfg.Breaker, cfg.Store.Limits(),
		upstream.GuardedDeps{Log: log, Observe: observe, Tracer: tp})
	return err
}

// openRedis opens the Redis client, where one is configured, recording
// spans of tp's where tp is set.
func (p *parts) openRedis(cfg config.Redis, tp trace.TracerProvider) error {
	var err error
	if p.rdb, err = platform.OpenRedis(cfg); err != nil {
		return err
	}
	if p.rdb == nil || tp == nil {
		return nil
	}
	return traceRedis(p.rdb, tp)
}

// traceRedis has rdb record spans of tp's for the commands of requests.
func traceRedis(rdb redis.UniversalClient, tp trace.TracerProvider) error {
	// Command arguments stay out of spans: they hold whole listings.
	// Dials happen in the pool's own time, outside any request, and so
	// do the checks of Redis's identity and size (the change feed's).
	// The cache's reads and a miss's fills are auto-pipelined: a batch
	// serves many requests, so its spans (and its connections'
	// handshakes) belong to none; the cache records each as "cache
	// get" and "cache set" instead. (The change feed's batches of
	// guarded sets, background work, go too.)
	background := func(cmd redis.Cmder) bool {
		switch cmd.Name() {
		case "info", "dbsize", "get", "hello", "client":
			return true
		}
		return false
	}
	autoPipelined := func(cmds []redis.Cmder) bool {
		return !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return !background(c) && c.Name() != "evalsha" })
	}
	if err := redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(tp), redisotel.WithDBStatement(false),
		redisotel.WithDialFilter(true), redisotel.WithCommandFilter(background), redisotel.WithCommandsFilter(autoPipelined)); err != nil {
		return fmt.Errorf("redis tracing: %w", err)
	}
	return nil
}

// openCache builds the listing cache on the guarded store and Redis, told
// of the store's changes where the feed is on.
func (p *parts) openCache(cfg config.Config, changes upstream.Feed, tp trace.TracerProvider, log *slog.Logger) error {
	var opts []cache.Option
	if cfg.Feed.Enabled {
		opts = append(opts, cache.WithFeed(changes))
	}
	var err error
	p.listings, err = platform.NewCache(cfg, p.rdb, cfg.CacheDeps(p.guarded, tp, log), opts...)
	return err
}

// openFeed builds the CDN purger, where a purge API is configured, and the
// change feed's consumer, which purges through it. It returns the purger
// of the gateway's own writes.
func (p *parts) openFeed(cfg config.Config, changes upstream.Feed, log *slog.Logger) (gateway.Purger, error) {
	var (
		purger gateway.Purger = gateway.NoPurge{}
		err    error
	)
	deps := feed.Deps{Store: changes, Target: p.listings, Redis: p.rdb != nil, Keys: gateway.PurgeKeys,
		Holder: holderName(), CacheLifetime: cfg.Cache.Fresh + cfg.Cache.Stale, Log: log}
	if cfg.Purge.URL != "" {
		if p.cdnPurger, err = cdn.NewPurger(cfg.Purge, cfg.PurgerDeps(log)); err != nil {
			return nil, err
		}
		purger, deps.Purger = p.cdnPurger, p.cdnPurger
	}
	if p.feed, err = feed.New(cfg.Feed, deps); err != nil {
		return nil, err
	}
	return purger, nil
}

// listen serves the public and admin listeners until ctx ends or one
// fails. On ctx's end readiness turns false, the public listener keeps
// serving for ShutdownDelay (the load balancer's probe interval), then
// in-flight requests are drained for up to ShutdownTimeout.
func listen(ctx context.Context, cfg config.Server, srv *gateway.Server, admin *http.Server, draining *atomic.Bool, log *slog.Logger) error {
	app := srv.App()
	public, err := net.Listen(app.Config().Network, cfg.Addr)
	if err != nil {
		return fmt.Errorf("public listener: %w", err)
	}
	private, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		public.Close()
		return fmt.Errorf("admin listener: %w", err)
	}
	errc := make(chan error, 2)
	go func() { errc <- app.Listener(gateway.Listener(public)) }()
	go func() {
		if err := admin.Serve(private); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("admin listener: %w", err)
		}
	}()
	// The bound addresses, so that port 0 (a port the kernel picks) can be
	// found in the log.
	log.Info("gateway listening", "addr", public.Addr().String(), "admin", private.Addr().String())

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	draining.Store(true)
	log.Info("shutting down", "delay", cfg.ShutdownDelay.String())
	time.Sleep(cfg.ShutdownDelay)
	shutdownErr := app.ShutdownWithTimeout(cfg.ShutdownTimeout)
	adminCtx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return errors.Join(shutdownErr, admin.Shutdown(adminCtx))
}
