// Command gateway is the caching edge gateway of the listing API. main only
// wires the parts: config, logger, store, breaker, cache, gateway. Its
// subcommands administer firms, users and listings with the same
// configuration.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/caarlos0/env/v11"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], env.ToMap(os.Environ()), os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  gateway [serve]
  gateway --help
  gateway firm add --name NAME
  gateway user add --firm N --email E [--password P]
  gateway listing import FILE|-
  gateway cdn purge --firm N | --listing ID|FIRM-NO`

func run(ctx context.Context, args []string, environ map[string]string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		return writeHelp(stdout)
	}
	cfg, err := loadConfig(environ)
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg.Server.LogLevel)
	if len(args) == 0 || len(args) == 1 && args[0] == "serve" {
		return serve(ctx, cfg, log)
	}
	if len(args) < 2 {
		return errors.New(usage)
	}
	switch args[0] + " " + args[1] {
	case "firm add":
		return addFirm(ctx, cfg, args[2:], stdout)
	case "user add":
		return addUser(ctx, cfg, args[2:], stdout)
	case "listing import":
		return importListings(ctx, cfg, log, args[2:], stdin, stdout)
	case "cdn purge":
		return purgeCDN(ctx, cfg, log, args[2:], stdout)
	default:
		return errors.New(usage)
	}
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}
