package commands

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/realty-gateway/gateway/cdn"
	"github.com/realty-gateway/gateway/gateway"
	"github.com/realty-gateway/gateway/internal/config"
	"github.com/realty-gateway/gateway/upstream"
)

// CDNPurge sends a hard purge of a firm's tag or a listing's tag to the
// CDN, once, and says whether it was acknowledged.
func CDNPurge(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, stdout io.Writer) error {
	const use = "usage: gateway cdn purge --firm N | --listing ID|FIRM-NO"
	fs := flag.NewFlagSet("cdn purge", flag.ContinueOnError)
	firmID := fs.Int64("firm", 0, "purge every listing of this firm")
	listing := fs.String("listing", "", "purge one listing, by id or by FIRM-NO")
	if err := parseFlags(fs, args, use); err != nil {
		return err
	}
	if (*firmID > 0) == (*listing != "") {
		return UsageError(use)
	}
	if cfg.Purge.URL == "" {
		return errors.New("no CDN purge API configured (GATEWAY_CDN_PURGE_URL)")
	}
	key := gateway.FirmKey(*firmID)
	if *listing != "" {
		id, err := listingID(ctx, cfg, *listing)
		if err != nil {
			return err
		}
		key = gateway.ListingKey(id)
	}
	purger, err := cdn.NewPurger(cfg.Purge, cfg.PurgerDeps(log))
	if err != nil {
		return err
	}
	if err := purger.PurgeNow(ctx, key); err != nil {
		return fmt.Errorf("purge %s: %w", key, err)
	}
	return printJSON(stdout, map[string]any{"purged": key})
}

// listingID resolves "ID" or "FIRM-NO", as the API's paths write them, to
// the listing's id.
func listingID(ctx context.Context, cfg config.Config, ref string) (int64, error) {
	key, ok := gateway.ParseRef(ref)
	if !ok {
		return 0, UsageError(fmt.Sprintf("listing %q: want ID or FIRM-NO", ref))
	}
	if key.ID > 0 {
		return key.ID, nil
	}
	var id int64
	err := withStore(ctx, cfg, func(s upstream.Store) error {
		l, err := s.ListingByNumber(ctx, key.FirmID, key.No)
		id = l.ID
		return err
	})
	return id, err
}
