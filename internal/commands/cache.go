package commands

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/gateway"
	"github.com/realty-gateway/gateway/internal/config"
	"github.com/realty-gateway/gateway/upstream"
)

// CachePurge removes both Redis keys of one listing and has every gateway
// sharing the Redis drop its local copies, so that the next read of
// either form loads the listing from the store.
func CachePurge(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, stdout io.Writer) error {
	const use = "usage: gateway cache purge ID|FIRM-NO"
	fs := flag.NewFlagSet("cache purge", flag.ContinueOnError)
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if err := parseFlags(fs, args, use); err != nil {
			return err // -h, or a flag: this command has none
		}
		return UsageError(use)
	}
	if len(args) != 1 {
		return UsageError(use)
	}
	ref := args[0]
	key, ok := gateway.ParseRef(ref)
	if !ok {
		return UsageError(fmt.Sprintf("listing %q: want ID or FIRM-NO\n%s", ref, use))
	}
	if cfg.Redis.URL == "" {
		return errors.New("no Redis configured (GATEWAY_REDIS_URL): each gateway's in-process cache is its own")
	}
	return withStore(ctx, cfg, func(s upstream.Store) error {
		return withCache(ctx, cfg, s, log, func(listings *cache.Cache) error {
			removed, err := listings.Purge(ctx, key)
			if err != nil {
				return fmt.Errorf("cache purge %s: %w", ref, err)
			}
			return printJSON(stdout, map[string]any{"purged": removed})
		})
	})
}
