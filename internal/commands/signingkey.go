package commands

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/realty-gateway/gateway/internal/config"
	"github.com/realty-gateway/gateway/signing"
	"github.com/realty-gateway/gateway/upstream"
)

// The token-signing keys' rotation, one command per step: add (publish a
// new key), activate (it signs), retire (an old key verifies until its
// last token expires). Every gateway reads the key set from the store
// within http.jwt.keysPoll.

// SigningKeyAdd publishes a key: generated into the data directory's
// signing-keys folder (mode 0600), or read from --key-file. It verifies
// and the JWKS lists it; it does not sign until activated.
func SigningKeyAdd(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("signing-key add", flag.ContinueOnError)
	alg := fs.String("alg", upstream.SigningAlgES256, "ES256 or EdDSA")
	file := fs.String("key-file", "", "publish this PEM private key instead of generating one")
	kid := fs.String("kid", "", "the key's kid, with --key-file (default: its RFC 7638 thumbprint)")
	const use = "usage: gateway signing-key add [--alg ES256|EdDSA] [--key-file PATH [--kid KID]]"
	if err := parseFlags(fs, args, use); err != nil {
		return err
	}
	if *kid != "" && *file == "" {
		return UsageError(use)
	}
	var (
		k   signing.LocalKey
		err error
	)
	if *file != "" {
		k, err = signing.ReadKeyFile(*file, *kid, *alg)
	} else {
		k, err = signing.GenerateKeyFile(cfg.SigningConfig().KeyDir, *alg)
	}
	if err != nil {
		return err
	}
	return withStore(ctx, cfg, func(s upstream.Store) error {
		stored, err := s.AddSigningKey(ctx, upstream.SigningKey{ID: k.ID, Alg: k.Alg, PublicKey: k.Public}, time.Now())
		if err != nil {
			return fmt.Errorf("publish key %s: %w", k.ID, err)
		}
		abs, _ := filepath.Abs(k.File)
		return printJSON(stdout, map[string]any{"kid": stored.ID, "alg": stored.Alg, "file": abs, "published": true,
			"signsAfter": stored.AddedAt.Add(publishLead(cfg)).UnixMilli()})
	})
}

// publishLead is how long a key is published before it may sign: the
// edges' JWKS caching (http.jwt.jwksMaxAge) and the gateways' poll.
func publishLead(cfg config.Config) time.Duration {
	return cfg.HTTP.JWT.JWKSMaxAge + cfg.HTTP.JWT.KeysPoll
}

// SigningKeyActivate makes a published key the signer. It refuses a key
// published for less than the edges' JWKS caching, unless --now.
func SigningKeyActivate(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("signing-key activate", flag.ContinueOnError)
	kid := fs.String("kid", "", "the key that signs from now")
	now := fs.Bool("now", false, "sign at once, though edges may not have fetched the key yet")
	const use = "usage: gateway signing-key activate --kid KID [--now]"
	if err := parseFlags(fs, args, use); err != nil {
		return err
	}
	if *kid == "" {
		return UsageError(use)
	}
	return withStore(ctx, cfg, func(s upstream.Store) error {
		k, err := findSigningKey(ctx, s, *kid)
		if err != nil {
			return err
		}
		if wait := time.Until(k.AddedAt.Add(publishLead(cfg))); wait > 0 && !*now {
			return fmt.Errorf("key %s was published %s ago; edges may cache the JWKS for %s: activate it in %s, or with --now",
				*kid, time.Since(k.AddedAt).Round(time.Second), cfg.HTTP.JWT.JWKSMaxAge, wait.Round(time.Second))
		}
		if k, err = s.ActivateSigningKey(ctx, *kid, time.Now()); err != nil {
			return fmt.Errorf("activate key %s: %w", *kid, err)
		}
		return printJSON(stdout, map[string]any{"kid": k.ID, "alg": k.Alg, "signsFrom": k.SignsFrom.UnixMilli()})
	})
}

// SigningKeyRetire retires a key that no longer signs: it verifies until
// every token it signed has expired (the token lifetime, the leeway and
// the gateways' poll from now), then leaves the JWKS.
func SigningKeyRetire(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("signing-key retire", flag.ContinueOnError)
	kid := fs.String("kid", "", "the key to retire")
	const use = "usage: gateway signing-key retire --kid KID"
	if err := parseFlags(fs, args, use); err != nil {
		return err
	}
	if *kid == "" {
		return UsageError(use)
	}
	jwt := cfg.HTTP.JWT
	until := time.Now().Add(jwt.TokenTTL + jwt.Leeway + jwt.KeysPoll)
	return withStore(ctx, cfg, func(s upstream.Store) error {
		k, err := s.RetireSigningKey(ctx, *kid, until)
		switch {
		case errors.Is(err, upstream.ErrNotFound):
			return fmt.Errorf("retire: no signing key %s", *kid)
		case err != nil:
			return fmt.Errorf("retire key %s: %w", *kid, err)
		}
		return printJSON(stdout, map[string]any{"kid": k.ID, "verifiesUntil": k.VerifiesUntil.UnixMilli()})
	})
}

// SigningKeyList prints the fleet's key set, retired keys too.
func SigningKeyList(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	if err := parseFlags(flag.NewFlagSet("signing-key list", flag.ContinueOnError), args, "usage: gateway signing-key list"); err != nil {
		return err
	}
	return withStore(ctx, cfg, func(s upstream.Store) error {
		keys, err := s.SigningKeys(ctx)
		if err != nil {
			return err
		}
		active, _ := upstream.ActiveSigningKey(keys)
		out := make([]map[string]any, 0, len(keys))
		for _, k := range keys {
			row := map[string]any{"kid": k.ID, "alg": k.Alg, "addedAt": k.AddedAt.UnixMilli(), "signs": k.ID == active.ID}
			if k.Retired() {
				row["verifiesUntil"] = k.VerifiesUntil.UnixMilli()
			}
			out = append(out, row)
		}
		return printJSON(stdout, map[string]any{"keys": out})
	})
}

func findSigningKey(ctx context.Context, s upstream.Store, kid string) (upstream.SigningKey, error) {
	keys, err := s.SigningKeys(ctx)
	if err != nil {
		return upstream.SigningKey{}, err
	}
	for _, k := range keys {
		if k.ID == kid {
			return k, nil
		}
	}
	return upstream.SigningKey{}, fmt.Errorf("no signing key %s (gateway signing-key list)", kid)
}
