// Package commands holds the gateway's admin subcommands, one file per
// command group: firm, user, token, listing, cache, cdn and version. Each
// command parses its own flags, opens what it needs from the
// configuration, prints one JSON line on success and closes what it
// opened. A command runs once, from main's goroutine; the parts it opens
// are its own.
package commands

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/internal/config"
	"github.com/realty-gateway/gateway/internal/platform"
	"github.com/realty-gateway/gateway/upstream"
)

// UsageError is a command line the gateway does not understand.
type UsageError string

func (u UsageError) Error() string { return string(u) }

// parseFlags parses a subcommand's flags; a bad flag is a usage error.
func parseFlags(fs *flag.FlagSet, args []string, use string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return UsageError(use)
	}
	if fs.NArg() > 0 {
		return UsageError(use)
	}
	return nil
}

// userFlags declares the --firm N and --email E of a command on a firm's
// users.
func userFlags(name, firmUsage, emailUsage string) (fs *flag.FlagSet, firmID *int64, email *string) {
	fs = flag.NewFlagSet(name, flag.ContinueOnError)
	return fs, fs.Int64("firm", 0, firmUsage), fs.String("email", "", emailUsage)
}

// printJSON writes the one JSON line an admin command answers with.
func printJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

func withStore(ctx context.Context, cfg config.Config, f func(upstream.Store) error) error {
	store, _, err := platform.OpenStore(ctx, cfg.Store, nil)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer store.Close()
	return f(store)
}

// withCache runs f with the listing cache over s: on Redis when one is
// configured, subscribed first (for at most a second), so that a write
// hears the other gateways acknowledge that they dropped what it replaces.
func withCache(ctx context.Context, cfg config.Config, s upstream.Store, log *slog.Logger, f func(*cache.Cache) error) error {
	// A load keeps its serving bound.
	deps := cfg.CacheDeps(s, nil, log)
	// An operator's command is on no request's clock: a Redis busy for
	// more than the serving timeout must not fail an import.
	cfg.Redis.Timeout = max(cfg.Redis.Timeout, commandRedisTimeout)
	rdb, err := platform.OpenRedis(cfg.Redis)
	if err != nil {
		return err
	}
	// The command's process ends with it, so its own tier holds nothing
	// anyone reads again: an import's floors filled all 64 MiB of it.
	// Without Redis it is the cache, so it stays, small.
	if rdb != nil {
		defer rdb.Close()
		cfg.Cache.LocalBytes = 0
	} else {
		cfg.Cache.LocalBytes = min(cfg.Cache.LocalBytes, commandLocalBytes)
	}
	listings, err := platform.NewCache(cfg, rdb, deps)
	if err != nil {
		return err
	}
	if rdb == nil {
		return f(listings)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go listings.Run(runCtx)
	select {
	case <-listings.Subscribed():
	case <-time.After(time.Second):
	}
	return f(listings)
}

// commandRedisTimeout is the least time a command gives one Redis
// operation.
const commandRedisTimeout = time.Second

// commandLocalBytes bounds a command's in-process cache without Redis.
const commandLocalBytes = 1 << 20
