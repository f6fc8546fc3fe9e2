package commands

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/realty-gateway/gateway/internal/config"
	"github.com/realty-gateway/gateway/internal/platform"
	"github.com/realty-gateway/gateway/revocation"
	"github.com/realty-gateway/gateway/upstream"
)

// TokenRevoke revokes the tokens of a firm, or of one of its users.
func TokenRevoke(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, stdout io.Writer) error {
	fs, firmID, email := userFlags("token revoke", "firm id: without --email, every token of the firm's users",
		"e-mail of the one user whose tokens are revoked")
	const use = "usage: gateway token revoke --firm N [--email E]"
	if err := parseFlags(fs, args, use); err != nil {
		return err
	}
	emailGiven := false
	fs.Visit(func(f *flag.Flag) { emailGiven = emailGiven || f.Name == "email" })
	if *firmID <= 0 || emailGiven && upstream.NormalizeEmail(*email) == "" {
		return UsageError(use)
	}
	return withStore(ctx, cfg, func(s upstream.Store) error {
		out := map[string]any{"firmId": *firmID}
		if err := revokeTokens(ctx, cfg, s, log, *firmID, *email, out); err != nil {
			return err
		}
		return printJSON(stdout, out)
	})
}

// revokeTokens records in the store that the tokens of the firm's user
// with email, or with an empty email of every user of the firm, issued
// until now are no longer valid, and announces it on Redis when one is
// configured, so that every gateway applies it at once; one that misses
// the announcement reads it from the store within GATEWAY_REVOCATION_POLL.
// It adds what it did to out: revokedAt (milliseconds since 1970) and
// announced.
func revokeTokens(ctx context.Context, cfg config.Config, s upstream.Store, log *slog.Logger, firmID int64, email string, out map[string]any) error {
	r, err := s.RevokeTokens(ctx, firmID, email, time.Now())
	switch {
	case errors.Is(err, upstream.ErrNotFound) && email == "":
		return fmt.Errorf("revoke tokens: no firm %d", firmID)
	case errors.Is(err, upstream.ErrNotFound):
		return fmt.Errorf("revoke tokens: firm %d has no user %s", firmID, upstream.NormalizeEmail(email))
	case err != nil:
		return err // names the firm
	}
	out["revokedAt"] = r.At.UnixMilli()
	out["announced"] = announce(ctx, cfg, log, r)
	return nil
}

// announce publishes r on Redis, and reports whether it went out. Without
// Redis, or with Redis down, the gateways read it from the store.
func announce(ctx context.Context, cfg config.Config, log *slog.Logger, r upstream.Revocation) bool {
	rdb, err := platform.OpenRedis(cfg.Redis)
	if err != nil || rdb == nil {
		return false
	}
	defer rdb.Close()
	// Dial and publish, each retried once.
	ctx, cancel := context.WithTimeout(ctx, 4*cfg.Redis.Timeout)
	defer cancel()
	if _, err := revocation.Announce(ctx, rdb, cfg.Redis.Prefix, r); err != nil {
		log.Warn("revocation recorded but not announced; gateways apply it from the store within the poll interval",
			"poll", cfg.Revocation.Poll.String(), "err", err)
		return false
	}
	return true
}
