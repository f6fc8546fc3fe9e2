// Command gateway is the caching edge gateway of the listing API. main only
// wires the parts: config, logger, store, breaker, cache, gateway. Its
// subcommands administer firms, users and listings with the same
// configuration.
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
	"runtime/debug"
	"syscall"

	"github.com/caarlos0/env/v11"
	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/logctx"
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

// usageError is a command line the gateway does not understand.
type usageError string

func (u usageError) Error() string { return string(u) }

// exitCode is 0 for success and for -h, 2 for a usage error, 1 for any
// other failure.
func exitCode(err error) int {
	var usage usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &usage):
		return 2
	default:
		return 1
	}
}

// parseFlags parses a subcommand's flags; a bad flag is a usage error.
func parseFlags(fs *flag.FlagSet, args []string, use string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError(use)
	}
	if fs.NArg() > 0 {
		return usageError(use)
	}
	return nil
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
  gateway cache purge ID|FIRM-NO`

func run(ctx context.Context, args []string, environ map[string]string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		return writeHelp(stdout)
	}
	if len(args) == 1 && args[0] == "version" {
		return printVersion(stdout)
	}
	cfg, err := loadConfig(environ)
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg.Server.LogLevel)
	redis.SetLogger(redisLog{log}) // the client's own lines, through the JSON log
	if len(args) == 0 || len(args) == 1 && args[0] == "serve" {
		return serve(ctx, cfg, log)
	}
	if len(args) == 1 && args[0] == "healthcheck" {
		return healthcheck(ctx, cfg.Server.AdminAddr)
	}
	if len(args) < 2 {
		return usageError(usage)
	}
	switch args[0] + " " + args[1] {
	case "firm add":
		return addFirm(ctx, cfg, args[2:], stdout)
	case "firm rotate-key":
		return rotateFirmKey(ctx, cfg, log, args[2:], stdout)
	case "user add":
		return addUser(ctx, cfg, args[2:], stdin, stdout)
	case "user disable":
		return disableUser(ctx, cfg, log, args[2:], stdout)
	case "user enable":
		return enableUser(ctx, cfg, args[2:], stdout)
	case "token revoke":
		return revokeCommand(ctx, cfg, log, args[2:], stdout)
	case "listing import":
		return importListings(ctx, cfg, log, args[2:], stdin, stdout)
	case "cdn purge":
		return purgeCDN(ctx, cfg, log, args[2:], stdout)
	case "cache purge":
		return purgeCache(ctx, cfg, log, args[2:], stdout)
	default:
		return usageError(usage)
	}
}

// printVersion prints the module version and the VCS revision it was
// built from.
func printVersion(w io.Writer) error {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return errors.New("no build information in the binary")
	}
	v := map[string]string{"version": bi.Main.Version, "go": bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v["revision"] = s.Value
		case "vcs.modified":
			v["modified"] = s.Value
		}
	}
	return printJSON(w, v)
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(logctx.NewHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})))
}
