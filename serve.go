package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/realty-gateway/gateway/cdn"
	"github.com/realty-gateway/gateway/gateway"
	"github.com/realty-gateway/gateway/ratelimit"
	"github.com/realty-gateway/gateway/upstream"
)

// serve runs the gateway until ctx ends, then drains it.
func serve(ctx context.Context, cfg config, log *slog.Logger) error {
	log.Info("starting gateway", "config", cfg)
	if err := ensureJWTSecret(&cfg, log); err != nil {
		return err
	}
	store, embedded, err := openStore(ctx, cfg.Store)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer store.Close()
	if embedded {
		if err := seedDemo(ctx, store, log); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	guarded := upstream.NewGuarded(store, cfg.Breaker, cfg.Store.limits(), log)
	rdb, err := openRedis(cfg.Redis)
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
	backgroundDone.Go(func() { listings.Run(background) })
	var purger gateway.Purger = gateway.NoPurge{}
	var cdnPurger *cdn.Purger
	if cfg.Purge.URL != "" {
		cdnPurger = cdn.NewPurger(cfg.Purge, log)
		backgroundDone.Go(func() { cdnPurger.Run(background) })
		purger = cdnPurger
	}
	limiter := ratelimit.New(rdb, cfg.Redis.Prefix, cfg.Redis.Timeout, log)
	srv, err := gateway.New(cfg.HTTP, listings, guarded, limiter, purger, log)
	if err != nil {
		return err
	}
	m := newMetrics(listings, guarded, limiter, cdnPurger, rdb)
	srv.Observe(m)
	var draining atomic.Bool
	admin := newAdmin(cfg.Server.AdminAddr, &draining, listings, guarded, srv, cdnPurger, m)
	return listen(ctx, cfg.Server, srv, admin, &draining, log)
}

// listen serves the public and admin listeners until ctx ends or one
// fails. On ctx's end readiness turns false, the public listener keeps
// serving for ShutdownDelay (the load balancer's probe interval), then
// in-flight requests are drained for up to ShutdownTimeout.
func listen(ctx context.Context, cfg serverConfig, srv *gateway.Server, admin *http.Server, draining *atomic.Bool, log *slog.Logger) error {
	app := srv.App()
	errc := make(chan error, 2)
	go func() { errc <- app.Listen(cfg.Addr) }()
	go func() {
		if err := admin.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("admin listener: %w", err)
		}
	}()
	log.Info("gateway listening", "addr", cfg.Addr, "admin", cfg.AdminAddr)

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
