package commands

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/realty-gateway/gateway/gateway"
	"github.com/realty-gateway/gateway/internal/config"
	"github.com/realty-gateway/gateway/upstream"
)

// UserAdd adds a user to a firm, with a password or passwordless.
func UserAdd(ctx context.Context, cfg config.Config, args []string, stdin io.Reader, stdout io.Writer) error {
	fs, firmID, email := userFlags("user add", "firm id", "e-mail")
	password := fs.String("password", "", "password (visible in ps and the shell's history: prefer --password-stdin); none makes a passwordless account")
	fromStdin := fs.Bool("password-stdin", false, "read the password from the first line of standard input")
	const use = "usage: gateway user add --firm N --email E [--password P | --password-stdin]"
	if err := parseFlags(fs, args, use); err != nil {
		return err
	}
	if *firmID <= 0 || upstream.NormalizeEmail(*email) == "" || *fromStdin && *password != "" {
		return UsageError(use)
	}
	if *fromStdin {
		line, err := bufio.NewReader(io.LimitReader(stdin, 4096)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("password from stdin: %w", err)
		}
		*password = strings.TrimRight(line, "\r\n")
		if *password == "" {
			return UsageError("--password-stdin: standard input holds no password")
		}
	}
	u := upstream.User{FirmID: *firmID, Email: *email}
	if *password != "" {
		hash, err := gateway.HashPassword(*password)
		if err != nil {
			return err
		}
		u.PasswordHash = hash
	}
	return withStore(ctx, cfg, func(s upstream.Store) error {
		added, err := s.AddUser(ctx, u)
		if err != nil {
			return fmt.Errorf("user %s: %w", upstream.NormalizeEmail(*email), err)
		}
		return printJSON(stdout, map[string]any{"firmUserId": added.ID})
	})
}

// UserDisable disables a firm's user: it can no longer log in, and login
// answers it as it answers a wrong password. Every token issued to it
// until then is revoked.
func UserDisable(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, stdout io.Writer) error {
	fs, firmID, email := userFlags("user disable", "firm id", "e-mail of the user to disable")
	const use = "usage: gateway user disable --firm N --email E"
	if err := parseFlags(fs, args, use); err != nil {
		return err
	}
	if *firmID <= 0 || upstream.NormalizeEmail(*email) == "" {
		return UsageError(use)
	}
	return withStore(ctx, cfg, func(s upstream.Store) error {
		u, err := s.DisableUser(ctx, *firmID, *email)
		switch {
		case errors.Is(err, upstream.ErrNotFound):
			return fmt.Errorf("disable user: firm %d has no user %s", *firmID, upstream.NormalizeEmail(*email))
		case err != nil:
			return err // names the firm
		}
		// After the disable: no login that reads the user from now on
		// succeeds, and one that read it before issues a token dated
		// before now (tokens carry the time their login arrived).
		out := map[string]any{"firmUserId": u.ID, "disabled": true}
		if err := revokeTokens(ctx, cfg, s, log, *firmID, u.Email, out); err != nil {
			return fmt.Errorf("user disabled, but %w; run gateway token revoke --firm %d --email %s", err, *firmID, u.Email)
		}
		return printJSON(stdout, out)
	})
}

// UserEnable enables a firm's disabled user: it logs in again. Tokens
// revoked when it was disabled stay revoked.
func UserEnable(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	fs, firmID, email := userFlags("user enable", "firm id", "e-mail of the user to enable")
	const use = "usage: gateway user enable --firm N --email E"
	if err := parseFlags(fs, args, use); err != nil {
		return err
	}
	if *firmID <= 0 || upstream.NormalizeEmail(*email) == "" {
		return UsageError(use)
	}
	return withStore(ctx, cfg, func(s upstream.Store) error {
		u, err := s.EnableUser(ctx, *firmID, *email)
		switch {
		case errors.Is(err, upstream.ErrNotFound):
			return fmt.Errorf("enable user: firm %d has no user %s", *firmID, upstream.NormalizeEmail(*email))
		case err != nil:
			return err // names the firm
		}
		return printJSON(stdout, map[string]any{"firmUserId": u.ID, "enabled": true})
	})
}
