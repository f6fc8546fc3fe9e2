// Command gateway is the caching edge gateway of the listing API. main only
// wires the parts: config, logger, store, breaker, cache, gateway. Its
// subcommands (internal/commands) administer firms, users and listings
// with the same configuration.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/caarlos0/env/v11"
	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/adminserver"
	"github.com/realty-gateway/gateway/internal/commands"
	"github.com/realty-gateway/gateway/internal/config"
	"github.com/realty-gateway/gateway/internal/logctx"
	"github.com/realty-gateway/gateway/internal/platform"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], env.ToMap(os.Environ()), os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) { // -h has printed the flags
		fmt.Fprintln(os.Stderr, "gateway:", err)
	}
	os.Exit(exitCode(err))
}

// exitCode is 0 for success and for -h, 2 for a usage error, 1 for any
// other failure.
func exitCode(err error) int {
	var usage commands.UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &usage):
		return 2
	default:
		return 1
	}
}

const usage = `usage:
  gateway [serve]
  gateway --help
  gateway version
  gateway healthcheck
  gateway firm add --name NAME
  gateway firm rotate-key --firm N [--keep-tokens]
  gateway user add --firm N --email E [--password P | --password-stdin]
  gateway user disable --firm N --email E
  gateway user enable --firm N --email E
  gateway token revoke --firm N [--email E]
  gateway listing import FILE|-
  gateway cdn purge --firm N | --listing ID|FIRM-NO
  gateway cache purge ID|FIRM-NO
  gateway signing-key add [--alg ES256|EdDSA] [--key-file PATH [--kid KID]]
  gateway signing-key activate --kid KID [--now]
  gateway signing-key retire --kid KID
  gateway signing-key list`

func run(ctx context.Context, args []string, environ map[string]string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		return config.WriteHelp(stdout, usage)
	}
	if len(args) == 1 && args[0] == "version" {
		return commands.Version(stdout)
	}
	cfg, err := config.Load(environ)
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg.Server.LogLevel)
	redis.SetLogger(platform.RedisLog{Log: log}) // the client's own lines, through the JSON log
	if len(args) == 0 || len(args) == 1 && args[0] == "serve" {
		return serve(ctx, cfg, log)
	}
	if len(args) == 1 && args[0] == "healthcheck" {
		return adminserver.Healthcheck(ctx, cfg.Server.AdminAddr)
	}
	if len(args) < 2 {
		return commands.UsageError(usage)
	}
	switch args[0] + " " + args[1] {
	case "firm add":
		return commands.FirmAdd(ctx, cfg, args[2:], stdout)
	case "firm rotate-key":
		return commands.FirmRotateKey(ctx, cfg, log, args[2:], stdout)
	case "user add":
		return commands.UserAdd(ctx, cfg, args[2:], stdin, stdout)
	case "user disable":
		return commands.UserDisable(ctx, cfg, log, args[2:], stdout)
	case "user enable":
		return commands.UserEnable(ctx, cfg, args[2:], stdout)
	case "token revoke":
		return commands.TokenRevoke(ctx, cfg, log, args[2:], stdout)
	case "listing import":
		return commands.ListingImport(ctx, cfg, log, args[2:], stdin, stdout, stderr)
	case "cdn purge":
		return commands.CDNPurge(ctx, cfg, log, args[2:], stdout)
	case "cache purge":
		return commands.CachePurge(ctx, cfg, log, args[2:], stdout)
	case "signing-key add":
		return commands.SigningKeyAdd(ctx, cfg, args[2:], stdout)
	case "signing-key activate":
		return commands.SigningKeyActivate(ctx, cfg, args[2:], stdout)
	case "signing-key retire":
		return commands.SigningKeyRetire(ctx, cfg, args[2:], stdout)
	case "signing-key list":
		return commands.SigningKeyList(ctx, cfg, args[2:], stdout)
	default:
		return commands.UsageError(usage)
	}
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(logctx.NewHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})))
}
