package commands

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/internal/config"
	"github.com/realty-gateway/gateway/upstream"
)

// ListingImport imports a JSON array of listings from a file or standard
// input, through the cache, so that no gateway serves what it replaces.
func ListingImport(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) != 1 {
		return UsageError("usage: gateway listing import FILE|-")
	}
	in := stdin
	if args[0] != "-" {
		f, err := os.Open(args[0])
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	ls, err := decodeImport(in)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	return withStore(ctx, cfg, func(s upstream.Store) error {
		return withCache(ctx, cfg, s, log, func(listings *cache.Cache) error {
			stored, err := listings.Import(ctx, ls)
			if err != nil {
				return fmt.Errorf("import: %w", err)
			}
			if n := listings.Stats().Incoherent; n > 0 {
				return fmt.Errorf("imported %d listings, but %d cache keys could be neither written nor cleared; they expire within the negative TTL", len(stored), n)
			}
			return printJSON(stdout, map[string]any{"imported": len(stored)})
		})
	})
}

// decodeImport reads a JSON array of listings, each through the same
// decoding and validation as POST /realty, keeping the given id, firm,
// user and dates.
func decodeImport(r io.Reader) ([]upstream.Listing, error) {
	var raws []json.RawMessage
	if err := json.NewDecoder(r).Decode(&raws); err != nil {
		return nil, fmt.Errorf("import file: want a JSON array of listings: %w", err)
	}
	ls := make([]upstream.Listing, len(raws))
	for i, raw := range raws {
		l, err := upstream.DecodeListing(raw, true)
		if err != nil {
			var id struct {
				ID int64 `json:"id"`
			}
			_ = json.Unmarshal(raw, &id)
			return nil, &upstream.ImportError{Index: i, ID: id.ID, Err: err}
		}
		ls[i] = l
	}
	return ls, nil
}
