package main

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// The import's speed (-import): `gateway listing import` of
// -import-listings new listings of about 1.7 KB (ids and numbers
// assigned), timed as a whole command (connect, read, write, commit), on
// PostgreSQL with the change feed's trigger on and on a new SQLite file;
// the command's peak RSS (the kernel's ru_maxrss of the child), also for
// -import-large listings when given; and the import of the same number
// into a running fleet: a gateway holding the change feed with a stub CDN
// that counts the purges it gets, from the command's end (its commit)
// until the feed's backlog is empty, with the lag sampled meanwhile.
//
//	go run ./deploy/bench -import
//	go run ./deploy/bench -import -import-listings 10000 -import-large 1000000

// importRun is one command's outcome.
type importRun struct {
	engine   string
	listings int
	fileMB   float64
	wall     time.Duration
	cpu      float64 // the command's user + system seconds
	pgCPU    float64 // the import's PostgreSQL backend
	maxRSS   int64   // KiB
	load     string  // /proc/loadavg before
}

func (r importRun) rate() float64 { return float64(r.listings) / r.wall.Seconds() }

// drainRun is the import into a running fleet.
type drainRun struct {
	importRun
	drain       time.Duration // from the command's end to an empty backlog
	peakBacklog int64
	peakLag     time.Duration
	lags        []string // samples: "t+1s: 40,000 records, lag 3.2 s"
	purges      int64
	applied     int64
}

func (l *lab) importBench(ctx context.Context) (string, error) {
	n := l.opts.importListings
	file := filepath.Join(l.work, "import.json")
	if err := writeImportFile(file, n); err != nil {
		return "", err
	}
	var runs []importRun
	for _, engine := range []string{"postgres", "sqlite"} {
		env := l.gatewayEnv("GATEWAY_REDIS_URL=")
		if engine == "sqlite" {
			env = l.sqliteEnv("import.db")
			if _, err := l.admin(ctx, env, nil, "firm", "add", "--name", "Import"); err != nil {
				return "", err
			}
			if _, err := l.admin(ctx, env, nil, "user", "add", "--firm", "1", "--email", "import@bench.example"); err != nil {
				return "", err
			}
		}
		log.Printf("importing %d listings into %s", n, engine)
		r, err := l.runImport(ctx, engine, env, file, n)
		if err != nil {
			return "", err
		}
		runs = append(runs, r)
	}
	if err := l.markFeedDone(ctx); err != nil {
		return "", err
	}

	log.Printf("importing %d listings into a running fleet", n)
	d, err := l.importIntoFleet(ctx, file, n)
	if err != nil {
		return "", err
	}

	if big := l.opts.importLarge; big > 0 {
		large := filepath.Join(l.work, "large.json")
		if err := os.Remove(file); err != nil {
			return "", err
		}
		if err := writeImportFile(large, big); err != nil {
			return "", err
		}
		log.Printf("importing %d listings into postgres", big)
		r, err := l.runImport(ctx, "postgres", l.gatewayEnv("GATEWAY_REDIS_URL="), large, big)
		if err != nil {
			return "", err
		}
		runs = append(runs, r)
	}
	return importReport(runs, d), nil
}

// writeImportFile writes n listings of about 1.7 KB, without ids or
// numbers, as a JSON array.
func writeImportFile(path string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	w.WriteString("[")
	for i := range n {
		if i > 0 {
			w.WriteString(",\n")
		}
		entry := listingsJSON(i+1, i+1, func(int) int { return 7 })
		entry = entry[1 : len(entry)-1]                                                  // one entry, without the array
		entry = strings.Replace(entry, fmt.Sprintf(`"id":%d,"no":%d,`, i+1, i+1), "", 1) // assigned
		w.WriteString(entry)
	}
	w.WriteString("]\n")
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// runImport runs the command on file and measures it.
func (l *lab) runImport(ctx context.Context, engine string, env []string, file string, n int) (importRun, error) {
	st, err := os.Stat(file)
	if err != nil {
		return importRun{}, err
	}
	r := importRun{engine: engine, listings: n, fileMB: float64(st.Size()) / 1e6, load: loadavg()}
	cmd := exec.CommandContext(ctx, l.gateway, "listing", "import", file)
	cmd.Env, cmd.Dir = env, l.work
	var stderr strings.Builder
	cmd.Stderr = &stderr
	// The import's backend lives as long as the command: sample its CPU
	// while it runs.
	var pgCPU atomic.Value
	pgCPU.Store(map[int]float64{})
	stop := make(chan struct{})
	sampled := make(chan struct{})
	before := cpuByPid(pgBackends(l.dbName))
	go func() {
		defer close(sampled)
		last := map[int]float64{}
		for {
			for p, v := range cpuByPid(pgBackends(l.dbName)) {
				last[p] = v
			}
			select {
			case <-stop:
				pgCPU.Store(last)
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	began := time.Now()
	out, err := cmd.Output()
	r.wall = time.Since(began)
	close(stop)
	<-sampled
	if err != nil {
		return r, fmt.Errorf("listing import: %w\n%s", err, stderr.String())
	}
	if !strings.Contains(string(out), fmt.Sprintf(`"imported":%d`, n)) {
		return r, fmt.Errorf("listing import printed %s", out)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.maxRSS = ru.Maxrss
		r.cpu = float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	}
	if engine == "postgres" {
		r.pgCPU = cpuSince(before, pgCPU.Load().(map[int]float64))
	}
	log.Printf("  %s: %d listings in %v (%.0f/s), command CPU %.1f s, PostgreSQL backend CPU %.1f s, peak RSS %d MiB",
		engine, n, r.wall.Round(time.Millisecond), r.rate(), r.cpu, r.pgCPU, r.maxRSS/1024)
	return r, nil
}

// markFeedDone leaves nothing for the fleet's feed but what comes next.
func (l *lab) markFeedDone(ctx context.Context) error {
	db, err := pgx.Connect(ctx, l.dbURL)
	if err != nil {
		return err
	}
	defer db.Close(context.Background())
	_, err = db.Exec(ctx, `UPDATE listing_changes SET applied_at = $1, done_at = $1 WHERE done_at IS NULL`, time.Now().UnixMilli())
	return err
}

// importIntoFleet starts a gateway that holds the feed, with Redis and a
// stub CDN, imports file, and watches the backlog drain.
func (l *lab) importIntoFleet(ctx context.Context, file string, n int) (drainRun, error) {
	var purges atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return drainRun{}, err
	}
	stub := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		purges.Add(1)
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = stub.Serve(ln) }()
	defer stub.Close()
	cdn := []string{"GATEWAY_CDN_MODE=true", "GATEWAY_CDN_PURGE_FORMAT=template",
		"GATEWAY_CDN_PURGE_URL=http://" + ln.Addr().String() + "/purge/{key}"}
	g, err := l.startGateway(ctx, "gateway-feed", false, "", cdn...)
	if err != nil {
		return drainRun{}, err
	}
	defer l.stopServer(g)
	db, err := pgx.Connect(ctx, l.dbURL)
	if err != nil {
		return drainRun{}, err
	}
	defer db.Close(context.Background())
	time.Sleep(time.Second) // the consumer takes the feed
	purgesBefore := purges.Load()
	var seqBefore int64
	if err := db.QueryRow(ctx, `SELECT COALESCE(max(seq), 0) FROM listing_changes`).Scan(&seqBefore); err != nil {
		return drainRun{}, err
	}

	var d drainRun
	d.importRun, err = l.runImport(ctx, "postgres, fleet running", l.gatewayEnv(cdn...), file, n)
	if err != nil {
		return d, err
	}
	end := time.Now()
	for next := time.Duration(0); ; {
		backlog, lag, err := feedBacklog(ctx, db)
		if err != nil {
			return d, err
		}
		since := time.Since(end)
		d.peakBacklog, d.peakLag = max(d.peakBacklog, backlog), max(d.peakLag, lag)
		if since >= next || backlog == 0 {
			d.lags = append(d.lags, fmt.Sprintf("%.0f s: %d records, lag %.1f s", since.Seconds(), backlog, lag.Seconds()))
			next += 2 * time.Second
		}
		if backlog == 0 {
			d.drain = since
			break
		}
		if since > 10*time.Minute {
			return d, fmt.Errorf("the backlog did not drain in 10 minutes: %d left", backlog)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // purges the feed may still send
	d.purges = purges.Load() - purgesBefore
	if err := db.QueryRow(ctx, `SELECT count(*) FROM listing_changes WHERE done_at IS NOT NULL AND seq > $1`,
		seqBefore).Scan(&d.applied); err != nil {
		return d, err
	}
	log.Printf("  drained in %v, peak backlog %d, peak lag %v, %d purges", d.drain.Round(time.Millisecond), d.peakBacklog, d.peakLag.Round(time.Millisecond), d.purges)
	return d, nil
}

// feedBacklog is the records not yet applied and the age of the oldest,
// by the database's clock.
func feedBacklog(ctx context.Context, db *pgx.Conn) (int64, time.Duration, error) {
	var n, age int64
	err := db.QueryRow(ctx, `SELECT count(*), COALESCE(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - min(changed_at), 0)
		FROM listing_changes WHERE applied_at IS NULL`).Scan(&n, &age)
	return n, time.Duration(age) * time.Millisecond, err
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func importReport(runs []importRun, d drainRun) string {
	var b strings.Builder
	b.WriteString("## Import\n\n`gateway listing import FILE`, the whole command (connect, read, write, commit), new listings of about 1.7 KB (ids and numbers assigned), the change feed's trigger on:\n\n")
	b.WriteString("| store | listings | file | wall | listings/s | command CPU | PostgreSQL backend CPU | peak RSS | load before (1, 5, 15 min) |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range append(runs, d.importRun) {
		pg := "–"
		if r.pgCPU > 0 {
			pg = fmt.Sprintf("%.1f s", r.pgCPU)
		}
		fmt.Fprintf(&b, "| %s | %d | %.0f MB | %.1f s | %.0f | %.1f s | %s | %d MiB | %s |\n",
			r.engine, r.listings, r.fileMB, r.wall.Seconds(), r.rate(), r.cpu, pg, r.maxRSS/1024, r.load)
	}
	fmt.Fprintf(&b, "\nInto a running fleet (one gateway holding the change feed, Redis, a stub CDN counting purges): the backlog of %d records drained %.1f s after the command returned (peak backlog %d; peak lag %.1f s, the age of the oldest record, which was written inside the import's transaction, so the import's own duration at its commit); %d of its records done; **%d purges** sent to the CDN.\n\nSamples after the command returned: %s.\n",
		d.listings, d.drain.Seconds(), d.peakBacklog, d.peakLag.Seconds(), d.applied, d.purges, strings.Join(d.lags, "; "))
	return b.String()
}
