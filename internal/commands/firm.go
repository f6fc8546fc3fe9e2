package commands

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/realty-gateway/gateway/gateway"
	"github.com/realty-gateway/gateway/internal/config"
	"github.com/realty-gateway/gateway/upstream"
)

// FirmAdd adds a firm with a new API key and prints the key once.
func FirmAdd(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("firm add", flag.ContinueOnError)
	name := fs.String("name", "", "firm name")
	const use = "usage: gateway firm add --name NAME"
	if err := parseFlags(fs, args, use); err != nil {
		return err
	}
	if *name == "" {
		return UsageError(use)
	}
	key, err := gateway.NewAPIKey()
	if err != nil {
		return err
	}
	return withStore(ctx, cfg, func(s upstream.Store) error {
		firm, err := s.AddFirm(ctx, *name, gateway.KeyDigest(key))
		if err != nil {
			return fmt.Errorf("firm %q: %w", *name, err)
		}
		return printJSON(stdout, map[string]any{"firmId": firm.ID, "apiKey": key})
	})
}

// FirmRotateKey gives a firm a new API key, made as firm add makes one,
// and prints it once. The old key stops resolving at once: login looks the
// key up in the store on every attempt. Unless --keep-tokens, every token
// of the firm's users issued until then is revoked too: a key is usually
// rotated because it leaked.
func FirmRotateKey(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("firm rotate-key", flag.ContinueOnError)
	firmID := fs.Int64("firm", 0, "id of the firm whose API key is replaced")
	keep := fs.Bool("keep-tokens", false, "keep the tokens already issued (a planned rotation); by default they are revoked")
	const use = "usage: gateway firm rotate-key --firm N [--keep-tokens]"
	if err := parseFlags(fs, args, use); err != nil {
		return err
	}
	if *firmID <= 0 {
		return UsageError(use)
	}
	key, err := gateway.NewAPIKey()
	if err != nil {
		return err
	}
	return withStore(ctx, cfg, func(s upstream.Store) error {
		firm, err := s.RotateFirmKey(ctx, *firmID, gateway.KeyDigest(key))
		switch {
		case errors.Is(err, upstream.ErrNotFound):
			return fmt.Errorf("rotate key: no firm %d", *firmID)
		case err != nil:
			return err // names the firm
		}
		out := map[string]any{"firmId": firm.ID, "apiKey": key}
		if *keep {
			out["tokensKept"] = true
		} else if err := revokeTokens(ctx, cfg, s, log, firm.ID, "", out); err != nil {
			return fmt.Errorf("key rotated, but %w; run gateway token revoke --firm %d", err, firm.ID)
		}
		return printJSON(stdout, out)
	})
}
