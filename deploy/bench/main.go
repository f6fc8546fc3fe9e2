// Command bench measures the gateway against the servers a reader would
// compare it with, in one run on this machine: it builds the gateway,
// starts every server on 127.0.0.1 (PostgreSQL and Redis must be running,
// as for the tests), drives each with wrk, interleaved, prints a markdown
// table and stops what it started. wrk, nginx and varnish are installed
// from Debian's packages where missing.
//
//	go run ./deploy/bench                      # the whole run: about 17 minutes, 11 with a kept -db
//	go run ./deploy/bench -quick               # a quick look at every part, about 3 minutes
//	go run ./deploy/bench -out deploy/bench/RESULTS.md
//	go run ./deploy/bench -miss                # the store misses alone, with profiles
//	go run ./deploy/bench -longtail -db bench_longtail  # the long tail alone, keeping its 1,000,000 listings
//	go run ./deploy/bench -memory
//	go run ./deploy/bench -feed -listings 10000  # the change feed's cost to writers (feed.go)
//	go run ./deploy/bench -import                # listing import: listings/s, peak RSS, the drain into a fleet (import.go)
//	go run ./deploy/bench -release -reps 6 -duration 10s  # this tree against 5aa46a5 on the hot hit (against.go), about 9 minutes
//	go run ./deploy/bench -against REV -profile  # against another commit (HEAD: A/B of uncommitted changes), with profiles
//	go run ./deploy/bench -burst -against cdd425d -reps 4  # the cold burst on 4 gateways, this tree against the build before the lease (burst.go), about 4 minutes
//	go run ./deploy/bench -soak -out /tmp/soak.md  # two gateways under 2 CPU hogs, wrk and writes for 10 minutes: old reads, the local tier, the feed's consumer (soak.go)
//
// Parts, each of which runs alone when named (with none named, all run):
//
//	-cases     the interleaved comparison (main run, ratios, scaling, pinned)
//	-miss      the two store-miss cases: CPU per miss of the gateway, PostgreSQL and Redis, and the top of a profile (perf)
//	-longtail  two replicas under Zipf(s) traffic over -longtail-listings, against the naive composition (longtail.go)
//	-memory    -memory-listings different listings read once by 8 clients, RSS and heap, with Redis and embedded (memory.go)
//	-codings   hot hits and store misses, identity against Chrome's Accept-Encoding: requests/s, bytes, CPU, and a
//	           listing's memory in Redis with its variants (codings.go); only when named
//	-tokens    the hot hit by the token's algorithm, in both shapes (Redis configured; embedded: SQLite, no Redis),
//	           interleaved, every other repetition in the reverse order: HS256, EdDSA and ES256 gateways, an HS256
//	           token padded to the EdDSA token's length and an EdDSA key of a two-character kid (the A/B of the
//	           token's size); the ratios to HS256 of the same shape, of the medians and of each repetition's pair
//	           (tokens.go; -tokens-cases picks cases, -profile adds a perf profile of each); only when named
//	-release   the release comparison, alone (not part of the whole run): builds -against REV (default 5aa46a5, the
//	           release before the change feed and revocation) from its own tree in a git worktree of the run's temporary
//	           directory, and this tree (uncommitted changes included) as usual; starts two gateways of each, each on
//	           its own store (own PostgreSQL database, SQLite file and Redis key prefix): local (Redis configured, the
//	           default local tier) and embedded (SQLite, no Redis), log level warn, all else at its defaults (the
//	           access log on); and fiber-static. Runs them interleaved, the two builds' case back to back, the order
//	           flipped each repetition, and reports both builds' requests/s, server CPU per request (utime + stime of
//	           the gateway's process from /proc, per request), the ratios of the medians and of each repetition's
//	           pair, against the release and against fiber-static, and the settings that the two builds' --help
//	           do not share (a setting the harness passes that either lacks stops the run). -profile adds a perf
//	           profile of each gateway and each part's share of its samples, both builds side by side. Use it on
//	           every change to the request path and quote its table; an even -reps puts each build first equally
//	           often. docs/performance.md ("Release against release") says how to read it on a shared machine.
//	-burst     the cold burst, alone (not part of the whole run): 4 gateways on one Redis key prefix and PostgreSQL
//	           (through a proxy of the bench's), -conns clients each (one wrk -t1 per gateway) at 200 listings that no
//	           gateway has read, at random, for -duration (3s unless given); reports the store's listing reads per
//	           listing, summed over the gateways, with p99, p99.9, max and errors; the store as it is and slowed by
//	           20 ms per answer. With -against REV, that commit's build too, built as -release builds it, the two
//	           interleaved (burst.go)
//	-soak      the soak, alone (not part of the whole run): two gateways on one fresh PostgreSQL database (-listings, 10,000
//	           unless given) and one Redis key prefix, the local tier on, -soak-hogs busy processes, wrk -t1 -c<-soak-conns>
//	           on each for -soak-duration, PUTs through both and UPDATEs in SQL, checked readers on both; reports the old
//	           reads, the seconds each gateway's local tier was off and the feed consumer's role changes, and fails (exit 1)
//	           on an old read or a final read that does not converge (soak.go)
//	-quick     shorter runs and fewer listings, for a look while developing
//	-db NAME   keep the run's PostgreSQL database under NAME and reuse it next time (the import of 1,000,000 listings takes
//	           about 6 minutes); rows imported by an older build lack what later schema steps fill when a row is written,
//	           so drop it after a schema change
//
// Cases: gateway-local (Redis configured, hot listing from the local
// tier), gateway-redis (the same with GATEWAY_LOCAL_CACHE_BYTES=0),
// gateway-embedded (no Redis, SQLite), gateway-miss (every request another
// of 100,000 listings, read from PostgreSQL, no Redis and a one-byte
// tier), gateway-miss-redis (the same in the production shape: Redis
// configured but empty, the default local tier), nginx-static (the same bytes
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
	flag.BoolVar(&opts.idle, "idle", false, "measure idle gateways' CPU and store writes instead (idle.go)")
	flag.DurationVar(&opts.idleDuration, "idle-duration", 20*time.Second, "with -idle: length of one measurement")
	flag.BoolVar(&opts.importBench, "import", false, "measure `gateway listing import` instead: listings/s on both stores, peak RSS, the drain into a running fleet (import.go)")
	flag.IntVar(&opts.importListings, "import-listings", 100_000, "with -import: listings per import")
	flag.IntVar(&opts.importLarge, "import-large", 0, "with -import: also import this many into PostgreSQL, for the peak RSS (0: none)")
	flag.BoolVar(&opts.cases, "cases", false, "run the interleaved comparison (main run, scaling, pinned)")
	flag.BoolVar(&opts.miss, "miss", false, "run the store-miss cases with their CPU split and profiles")
	flag.BoolVar(&opts.longtail, "longtail", false, "run gateway-longtail against naive-longtail")
	flag.BoolVar(&opts.memory, "memory", false, "run the memory case")
	flag.BoolVar(&opts.codings, "codings", false, "run hot hits and misses as identity against Chrome's Accept-Encoding (codings.go); not part of the whole run")
	flag.BoolVar(&opts.tokens, "tokens", false, "run the hot hit with HS256, EdDSA and ES256 tokens, Redis configured and embedded, interleaved (tokens.go); not part of the whole run")
	flag.StringVar(&opts.tokenCases, "tokens-cases", "", "with -tokens: the cases to run, comma separated (empty: all; see tokens.go)")
	flag.IntVar(&opts.longtailListings, "longtail-listings", 1_000_000, "with -longtail: listings in PostgreSQL")
	flag.Float64Var(&opts.zipfS, "zipf-s", 1.1, "with -longtail: the Zipf exponent of the requests (> 1)")
	flag.IntVar(&opts.memoryListings, "memory-listings", 100_000, "with -memory: listings read once each")
	flag.BoolVar(&opts.profile, "profile", true, "with -miss: record a profile of each miss case with perf (with -idle, -release or -tokens: only when given)")
	flag.IntVar(&opts.profileLines, "profile-lines", 20, "with -profile: lines of each profile's list with callees")
	flag.BoolVar(&opts.release, "release", false, "compare this tree's gateway with -against's on the hot hit, alone (against.go)")
	flag.StringVar(&opts.against, "against", "5aa46a5", "with -release: the commit to compare with, built from its own tree (giving it implies -release, but for -burst)")
	flag.DurationVar(&opts.burstRedisTimeout, "burst-redis-timeout", 0, "with -burst: every gateway's GATEWAY_REDIS_TIMEOUT (0: its default)")
	flag.BoolVar(&opts.burst, "burst", false, "run the cold burst alone: 4 gateways, 200 cold listings, the store's reads per listing (burst.go); with -against, that commit's build too")
	flag.BoolVar(&opts.soak, "soak", false, "run the soak alone: two gateways under CPU hogs, wrk and writes; old reads, the local tier's seconds off, the feed consumer's role changes (soak.go)")
	flag.DurationVar(&opts.soakDuration, "soak-duration", 10*time.Minute, "with -soak: length of the load")
	flag.IntVar(&opts.soakHogs, "soak-hogs", 2, "with -soak: busy processes (yes >/dev/null) run beside the gateways")
	flag.Func("soak-env", "with -soak: KEY=VALUE added to both gateways' environment (repeatable)", func(kv string) error {
		if !strings.Contains(kv, "=") {
			return fmt.Errorf("want KEY=VALUE, got %q", kv)
		}
		opts.soakEnv = append(opts.soakEnv, kv)
		return nil
	})
	flag.IntVar(&opts.soakConns, "soak-conns", 16, "with -soak: wrk connections per gateway (one thread each)")
	flag.IntVar(&opts.soakWriteRate, "soak-write-rate", 10, "with -soak: PUTs a second through each gateway (0: none)")
	flag.Float64Var(&opts.soakSQLRate, "soak-sql-rate", 2, "with -soak: UPDATEs a second in SQL, behind the gateways (0: none)")
	flag.IntVar(&opts.soakReaders, "soak-readers", 2, "with -soak: checked readers per gateway")
	flag.DurationVar(&opts.soakSQLBound, "soak-sql-bound", 30*time.Second, "with -soak: a read older than a SQL write committed this long before it is an old read")
	flag.StringVar(&opts.db, "db", "", "PostgreSQL database to use and keep (created and seeded where missing); empty: a new one, dropped at the end")
	quick := flag.Bool("quick", false, "a quick look: -reps 1 -duration 2s, 30,000 listings (20,000 for -longtail, 10,000 for -memory), no scaling or pinned run")
	flag.Parse()
	if *quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range map[string]string{"reps": "1", "duration": "2s", "listings": "30000", "longtail-listings": "20000",
			"memory-listings": "10000", "skip-pinned": "true"} {
			if !set[name] {
				_ = flag.Set(name, v)
			}
		}
		opts.quick = true
	}
	flag.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "against":
			opts.release, opts.againstSet = true, true
		case "profile":
			opts.profileSet = true
		}
	})
	if opts.soak {
		opts.release, opts.burst, opts.idle, opts.feed, opts.importBench = false, false, false, false, false
		if opts.soakDuration < 5*time.Second || opts.soakReaders < 1 || opts.soakHogs < 0 || opts.soakWriteRate < 0 || opts.soakSQLRate < 0 {
			log.Fatal("-soak-duration must be at least 5s, -soak-readers at least 1, the rates and -soak-hogs not negative")
		}
	}
	if opts.burst {
		opts.release = false
		if !durationSet() {
			opts.duration = 3 * time.Second
		}
	}
	if !opts.importBench && !opts.cases && !opts.miss && !opts.longtail && !opts.memory && !opts.codings && !opts.tokens {
		opts.cases, opts.miss, opts.longtail, opts.memory = true, true, true, true
	}
	if opts.zipfS <= 1 {
		log.Fatal("-zipf-s must be above 1")
	}
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
	importBench           bool
	importListings        int
	importLarge           int
	feedDuration          time.Duration
	writers               int
	// the parts to run
	cases, miss, longtail, memory, codings, tokens bool
	quick                                          bool
	tokenCases                                     string
	longtailListings                               int
	zipfS                                          float64
	memoryListings                                 int
	profile                                        bool
	profileSet                                     bool // -profile given: -release profiles only then
	profileLines                                   int
	db                                             string
	idle                                           bool
	idleDuration                                   time.Duration
	// release compares this tree with the commit against (against.go).
	release bool
	against string
	// burst runs the cold burst (burst.go); againstSet: -against was
	// given, whose build it runs too.
	burst, againstSet bool
	burstRedisTimeout time.Duration // with -burst: GATEWAY_REDIS_TIMEOUT, 0: the default
	// soak runs the soak (soak.go) with its settings.
	soak                bool
	soakDuration        time.Duration
	soakEnv             []string // KEY=VALUE for both gateways
	soakHogs, soakConns int
	soakWriteRate       int
	soakSQLRate         float64
	soakReaders         int
	soakSQLBound        time.Duration
}

// durationSet reports whether -duration was given.
func durationSet() bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "duration" })
	return set
}

func run(ctx context.Context, opts options) error {
	if err := ensureTools(opts.cases && !opts.feed && !opts.release && !opts.idle && !opts.importBench && !opts.burst && !opts.soak); err != nil {
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
	measure := lab.measure
	switch {
	case opts.soak: // a lab of its own
		measure = func(ctx context.Context) (string, error) { return soakBench(ctx, opts, root, work) }
	case opts.burst: // labs of its own
		measure = func(ctx context.Context) (string, error) { return burstBench(ctx, opts, root, work) }
	case opts.release: // two labs of its own
		measure = func(ctx context.Context) (string, error) { return releaseBench(ctx, opts, root, work) }
	case opts.idle: // a lab of its own
		measure = func(ctx context.Context) (string, error) { return idleBench(ctx, opts, root, work) }
	case opts.feed:
		measure = lab.feedBench
	case opts.importBench:
		measure = lab.importBench
	}
	if !opts.release && !opts.idle && !opts.burst && !opts.soak {
		if err := lab.prepare(ctx); err != nil {
			return err
		}
	}
	report, err := measure(ctx)
	if err != nil {
		if report != "" { // what the parts before the failure measured
			fmt.Print(report)
		}
		return err
	}
	fmt.Print(report)
	if opts.out != "" {
		return os.WriteFile(opts.out, []byte(report), 0o644)
	}
	return nil
}

// ensureTools installs wrk, and with all nginx and varnish, where missing.
func ensureTools(all bool) error {
	var missing []string
	for tool, pkg := range map[string]string{"wrk": "wrk", "nginx": "nginx-light", "varnishd": "varnish"} {
		if tool != "wrk" && !all {
			continue
		}
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
	before := map[int]bool{}
	for _, name := range []string{"nginx", "varnishd", "cache-main"} {
		for _, pid := range pidsOf(name) {
			before[pid] = true
		}
	}
	if out, err := exec.Command("apt-get", "update", "-qq").CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get update: %w\n%s", err, out)
	}
	cmd := exec.Command("apt-get", append([]string{"install", "-y", "-qq"}, missing...)...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get install %v: %w\n%s", missing, err, out)
	}
	// Debian starts the packages' own services; they are not ours. Only
	// those the install started are stopped, by their ids.
	for _, name := range []string{"nginx", "varnishd", "cache-main"} {
		for _, pid := range pidsOf(name) {
			if !before[pid] {
				_ = syscall.Kill(pid, syscall.SIGTERM)
			}
		}
	}
	return nil
}
