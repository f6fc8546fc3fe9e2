// Command bench measures the gateway against the servers a reader would
// compare it with, in one run on this machine: it builds the gateway,
// starts every server on 127.0.0.1 (PostgreSQL and Redis must be running,
// as for the tests), drives each with wrk, interleaved, prints a markdown
// table and stops what it started. wrk, nginx and varnish are installed
// from Debian's packages where missing.
//
//	go run ./deploy/bench                      # the whole run, about 12 minutes
//	go run ./deploy/bench -reps 1 -duration 2s # a quick look
//	go run ./deploy/bench -out deploy/bench/RESULTS.md
//	go run ./deploy/bench -feed -listings 10000  # the change feed's cost to writers (feed.go)
//
// Cases: gateway-local (Redis configured, hot listing from the local
// tier), gateway-redis (the same with GATEWAY_LOCAL_CACHE_BYTES=0),
// gateway-embedded (no Redis, SQLite), gateway-miss (every request another
// of 100,000 listings, read from PostgreSQL), nginx-static (the same bytes
// from a file), varnish-hit (the same bytes from Varnish's cache),
// fiber-static (a bare Fiber handler, the same bytes from memory, no JWT)
// and naive (Fiber, contrib/jwt HS256 with its defaults, one go-redis GET
// per request).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/realty-gateway/gateway/internal/gatewaytest"
)

func main() {
	if len(os.Args) > 1 && strings.HasPrefix(os.Args[1], "serve-") {
		if err := serveBaseline(os.Args[1], os.Args[2:]); err != nil {
			log.Fatal(err)
		}
		return
	}
	opts := options{}
	flag.IntVar(&opts.reps, "reps", 5, "repetitions of each case, interleaved")
	flag.DurationVar(&opts.duration, "duration", 5*time.Second, "length of one wrk run")
	flag.IntVar(&opts.conns, "conns", 64, "wrk connections")
	flag.IntVar(&opts.listings, "listings", 100_000, "listings in PostgreSQL for gateway-miss")
	flag.StringVar(&opts.out, "out", "", "also write the report to this file")
	flag.BoolVar(&opts.skipPinned, "skip-pinned", false, "skip the run pinned to separate cores")
	flag.BoolVar(&opts.feed, "feed", false, "measure the change feed's cost to writers instead (see feed.go)")
	flag.DurationVar(&opts.feedDuration, "feed-duration", 30*time.Second, "with -feed: length of one run of writers")
	flag.IntVar(&opts.writers, "feed-writers", 8, "with -feed: concurrent SQL writers")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts); err != nil {
		log.Fatal(err)
	}
}

type options struct {
	reps, conns, listings int
	duration              time.Duration
	out                   string
	skipPinned            bool
	feed                  bool
	feedDuration          time.Duration
	writers               int
}

func run(ctx context.Context, opts options) error {
	if err := ensureTools(); err != nil {
		return err
	}
	root, err := gatewaytest.ModuleRoot()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "gateway-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := os.Chmod(work, 0o755); err != nil { // nginx's workers read files there
		return err
	}
	lab := &lab{work: work, root: root, opts: opts}
	defer lab.stopAll()
	if err := lab.prepare(ctx); err != nil {
		return err
	}
	measure := lab.measure
	if opts.feed {
		measure = lab.feedBench
	}
	report, err := measure(ctx)
	if err != nil {
		return err
	}
	fmt.Print(report)
	if opts.out != "" {
		return os.WriteFile(opts.out, []byte(report), 0o644)
	}
	return nil
}

// ensureTools installs wrk, nginx and varnish where missing.
func ensureTools() error {
	var missing []string
	for tool, pkg := range map[string]string{"wrk": "wrk", "nginx": "nginx-light", "varnishd": "varnish"} {
		if _, err := exec.LookPath(tool); err != nil {
			if _, err := os.Stat("/usr/sbin/" + tool); err != nil {
				missing = append(missing, pkg)
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	log.Printf("installing %v", missing)
	if out, err := exec.Command("apt-get", "update", "-qq").CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get update: %w\n%s", err, out)
	}
	cmd := exec.Command("apt-get", append([]string{"install", "-y", "-qq"}, missing...)...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get install %v: %w\n%s", missing, err, out)
	}
	// Debian starts the packages' own services; they are not ours.
	_ = exec.Command("pkill", "-x", "nginx").Run()
	_ = exec.Command("pkill", "-x", "varnishd").Run()
	return nil
}
