package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/cdn"
	"github.com/realty-gateway/gateway/gateway"
	"github.com/realty-gateway/gateway/upstream"
)

// printJSON writes the one JSON line an admin command answers with.
func printJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

func withStore(ctx context.Context, cfg config, f func(upstream.Store) error) error {
	store, _, err := openStore(ctx, cfg.Store, nil)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer store.Close()
	return f(store)
}

// withCache runs f with the listing cache over s: on Redis when one is
// configured, subscribed first (for at most a second), so that a write
// hears the other gateways acknowledge that they dropped what it replaces.
func withCache(ctx context.Context, cfg config, s upstream.Store, log *slog.Logger, f func(*cache.Cache) error) error {
	// A load keeps its serving bound.
	deps := cfg.cacheDeps(s, nil, log)
	// An operator's command is on no request's clock: a Redis busy for
	// more than the serving timeout must not fail an import.
	cfg.Redis.Timeout = max(cfg.Redis.Timeout, commandRedisTimeout)
	rdb, err := openRedis(cfg.Redis)
	if err != nil {
		return err
	}
	if rdb == nil {
		listings, err := newCache(cfg, nil, deps)
		if err != nil {
			return err
		}
		return f(listings)
	}
	defer rdb.Close()
	listings, err := newCache(cfg, rdb, deps)
	if err != nil {
		return err
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

func addFirm(ctx context.Context, cfg config, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("firm add", flag.ContinueOnError)
	name := fs.String("name", "", "firm name")
	const use = "usage: gateway firm add --name NAME"
	if err := parseFlags(fs, args, use); err != nil {
		return err
	}
	if *name == "" {
		return usageError(use)
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

// rotateFirmKey gives a firm a new API key, made as firm add makes one,
// and prints it once. The old key stops resolving at once: login looks the
// key up in the store on every attempt. Unless --keep-tokens, every token
// of the firm's users issued until then is revoked too: a key is usually
// rotated because it leaked.
func rotateFirmKey(ctx context.Context, cfg config, log *slog.Logger, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("firm rotate-key", flag.ContinueOnError)
	firmID := fs.Int64("firm", 0, "id of the firm whose API key is replaced")
	keep := fs.Bool("keep-tokens", false, "keep the tokens already issued (a planned rotation); by default they are revoked")
	const use = "usage: gateway firm rotate-key --firm N [--keep-tokens]"
	if err := parseFlags(fs, args, use); err != nil {
		return err
	}
	if *firmID <= 0 {
		return usageError(use)
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

// disableUser disables a firm's user: it can no longer log in, and login
// answers it as it answers a wrong password. Every token issued to it
// until then is revoked.
func disableUser(ctx context.Context, cfg config, log *slog.Logger, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("user disable", flag.ContinueOnError)
	firmID := fs.Int64("firm", 0, "firm id")
	email := fs.String("email", "", "e-mail of the user to disable")
	const use = "usage: gateway user disable --firm N --email E"
	if err := parseFlags(fs, args, use); err != nil {
		return err
	}
	if *firmID <= 0 || upstream.NormalizeEmail(*email) == "" {
		return usageError(use)
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

func addUser(ctx context.Context, cfg config, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("user add", flag.ContinueOnError)
	firmID := fs.Int64("firm", 0, "firm id")
	email := fs.String("email", "", "e-mail")
	password := fs.String("password", "", "password (visible in ps and the shell's history: prefer --password-stdin); none makes a passwordless account")
	fromStdin := fs.Bool("password-stdin", false, "read the password from the first line of standard input")
	const use = "usage: gateway user add --firm N --email E [--password P | --password-stdin]"
	if err := parseFlags(fs, args, use); err != nil {
		return err
	}
	if *firmID <= 0 || upstream.NormalizeEmail(*email) == "" || *fromStdin && *password != "" {
		return usageError(use)
	}
	if *fromStdin {
		line, err := bufio.NewReader(io.LimitReader(stdin, 4096)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("password from stdin: %w", err)
		}
		*password = strings.TrimRight(line, "\r\n")
		if *password == "" {
			return usageError("--password-stdin: standard input holds no password")
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

func importListings(ctx context.Context, cfg config, log *slog.Logger, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) != 1 {
		return usageError("usage: gateway listing import FILE|-")
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

// purgeCDN sends a hard purge of a firm's tag or a listing's tag to the
// CDN, once, and says whether it was acknowledged.
func purgeCDN(ctx context.Context, cfg config, log *slog.Logger, args []string, stdout io.Writer) error {
	const use = "usage: gateway cdn purge --firm N | --listing ID|FIRM-NO"
	fs := flag.NewFlagSet("cdn purge", flag.ContinueOnError)
	firmID := fs.Int64("firm", 0, "purge every listing of this firm")
	listing := fs.String("listing", "", "purge one listing, by id or by FIRM-NO")
	if err := parseFlags(fs, args, use); err != nil {
		return err
	}
	if (*firmID > 0) == (*listing != "") {
		return usageError(use)
	}
	if cfg.Purge.URL == "" {
		return errors.New("no CDN purge API configured (GATEWAY_CDN_PURGE_URL)")
	}
	key := "firm-" + strconv.FormatInt(*firmID, 10)
	if *listing != "" {
		id, err := listingID(ctx, cfg, *listing)
		if err != nil {
			return err
		}
		key = "realty-" + strconv.FormatInt(id, 10)
	}
	purger, err := cdn.NewPurger(cfg.Purge, cfg.purgerDeps(log))
	if err != nil {
		return err
	}
	if err := purger.PurgeNow(ctx, key); err != nil {
		return fmt.Errorf("purge %s: %w", key, err)
	}
	return printJSON(stdout, map[string]any{"purged": key})
}

// listingID resolves "ID" or "FIRM-NO" to the listing's id.
func listingID(ctx context.Context, cfg config, ref string) (int64, error) {
	firm, no, numbered := strings.Cut(ref, "-")
	if !numbered {
		id, err := strconv.ParseInt(ref, 10, 64)
		if err != nil || id <= 0 {
			return 0, usageError(fmt.Sprintf("listing %q: want ID or FIRM-NO", ref))
		}
		return id, nil
	}
	f, errF := strconv.ParseInt(firm, 10, 64)
	n, errN := strconv.ParseInt(no, 10, 64)
	if errF != nil || errN != nil {
		return 0, usageError(fmt.Sprintf("listing %q: want ID or FIRM-NO", ref))
	}
	var id int64
	err := withStore(ctx, cfg, func(s upstream.Store) error {
		l, err := s.ListingByNumber(ctx, f, n)
		id = l.ID
		return err
	})
	return id, err
}
