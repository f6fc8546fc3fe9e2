package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/gateway"
	"github.com/realty-gateway/gateway/upstream"
)

// printJSON writes the one JSON line an admin command answers with.
func printJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

func withStore(ctx context.Context, cfg config, f func(upstream.Store) error) error {
	store, _, err := openStore(ctx, cfg)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer store.Close()
	return f(store)
}

func addFirm(ctx context.Context, cfg config, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("firm add", flag.ContinueOnError)
	name := fs.String("name", "", "firm name")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" || fs.NArg() > 0 {
		return errors.New("usage: gateway firm add --name NAME")
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

func addUser(ctx context.Context, cfg config, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("user add", flag.ContinueOnError)
	firmID := fs.Int64("firm", 0, "firm id")
	email := fs.String("email", "", "e-mail")
	password := fs.String("password", "", "password; none makes a passwordless account")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *firmID <= 0 || upstream.NormalizeEmail(*email) == "" || fs.NArg() > 0 {
		return errors.New("usage: gateway user add --firm N --email E [--password P]")
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

// importEntry is one listing of an import file: the spec's shape, plus the
// top-level latitude, longitude and nearLocation that older exports carry.
type importEntry struct {
	upstream.Listing
	IsActive     *bool    `json:"isActive"`
	Latitude     *float64 `json:"latitude"`
	Longitude    *float64 `json:"longitude"`
	NearLocation *bool    `json:"nearLocation"`
}

func (e importEntry) listing() upstream.Listing {
	l := e.Listing
	l.IsActive = e.IsActive == nil || *e.IsActive
	if l.Location.Latitude == nil {
		l.Location.Latitude = e.Latitude
	}
	if l.Location.Longitude == nil {
		l.Location.Longitude = e.Longitude
	}
	if l.Location.NearLocation == nil {
		l.Location.NearLocation = e.NearLocation
	}
	return l
}

func decodeImport(r io.Reader) ([]upstream.Listing, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var entries []importEntry
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("import file: %w", err)
	}
	ls := make([]upstream.Listing, len(entries))
	for i, e := range entries {
		ls[i] = e.listing()
	}
	return ls, nil
}

func importListings(ctx context.Context, cfg config, log *slog.Logger, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) != 1 {
		return errors.New("usage: gateway listing import FILE|-")
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
		return err
	}
	return withStore(ctx, cfg, func(s upstream.Store) error {
		stored, err := s.ImportListings(ctx, ls)
		if err != nil {
			return fmt.Errorf("import: %w", err)
		}
		if err := forgetCached(ctx, cfg, log, stored); err != nil {
			return err
		}
		return printJSON(stdout, map[string]any{"imported": len(stored)})
	})
}

// forgetCached clears both cache keys of each imported listing in Redis,
// so that a cached "absent" never hides a new listing.
func forgetCached(ctx context.Context, cfg config, log *slog.Logger, ls []upstream.Listing) error {
	rdb, err := openRedis(cfg)
	if err != nil || rdb == nil {
		return err
	}
	defer rdb.Close()
	c := cache.NewRedis(nil, rdb, cfg.RedisTimeout, cacheConfig(cfg), log)
	var errs []error
	for _, l := range ls {
		if err := c.Invalidate(ctx, l); err != nil {
			errs = append(errs, fmt.Errorf("listing %d: %w", l.ID, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("imported, but clearing cached keys failed; they expire within the negative TTL: %w", err)
	}
	return nil
}
