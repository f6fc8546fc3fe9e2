package main

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// The change feed's cost to writers other than the gateway (-feed):
// concurrent single-row UPDATEs made in SQL, as fast as the machine
// allows, with the feed's triggers disabled and enabled in turn
// (interleaved), while two gateways run with the feed on; and the
// gateway's own PUTs, the same way.
//
//	go run ./deploy/bench -feed                  # 2 rounds of 30 s each way
//	go run ./deploy/bench -feed -feed-duration 5s -reps 1

// feedTriggers are the triggers that the feed adds to listings.
var feedTriggers = []string{"listings_change_feed"}

type writeRun struct {
	triggers bool
	// paused: the gateways were stopped (SIGSTOP) while the writers ran,
	// so the run measures the trigger alone, not the consumer's work on
	// the same cores; the backlog is drained after SIGCONT.
	paused     bool
	writes     int
	throughput float64 // writes per second
	p50, p99   time.Duration
	// with the triggers on: the peaks seen while writing, and how long the
	// backlog took to drain once the writers stopped.
	peakLag     time.Duration
	peakBacklog int64
	peakTable   int64
	drain       time.Duration
}

func (l *lab) feedBench(ctx context.Context) (string, error) {
	a, err := l.startGateway(ctx, "gateway-local", false, "")
	if err != nil {
		return "", err
	}
	b, err := l.startGateway(ctx, "gateway-b", false, "")
	if err != nil {
		return "", err
	}
	if err := l.login(); err != nil {
		return "", err
	}
	db, err := pgx.Connect(ctx, l.dbURL)
	if err != nil {
		return "", err
	}
	defer db.Close(context.Background())

	var runs []writeRun
	var puts = map[bool][]time.Duration{}
	gateways := []*server{a, b}
	for rep := range l.opts.reps {
		for _, mode := range []struct{ on, paused bool }{{false, false}, {true, false}, {true, true}} {
			if err := setTriggers(ctx, db, mode.on); err != nil {
				return "", err
			}
			log.Printf("round %d, triggers %v, gateways paused %v: %v of SQL writes", rep+1, mode.on, mode.paused, l.opts.feedDuration)
			if mode.paused {
				signalAll(gateways, syscall.SIGSTOP)
			}
			r, err := l.sqlWrites(ctx, db, mode.on, func() { signalAll(gateways, syscall.SIGCONT) })
			signalAll(gateways, syscall.SIGCONT)
			if err != nil {
				return "", err
			}
			r.paused = mode.paused
			runs = append(runs, r)
			if mode.paused {
				continue
			}
			d, err := l.ownPuts(ctx, a, 200)
			if err != nil {
				return "", err
			}
			puts[mode.on] = append(puts[mode.on], d...)
		}
	}
	if err := setTriggers(ctx, db, true); err != nil {
		return "", err
	}
	return feedReport(l.opts, runs, puts), nil
}

// signalAll sends sig to every gateway's process group.
func signalAll(gateways []*server, sig syscall.Signal) {
	for _, g := range gateways {
		_ = syscall.Kill(-g.cmd.Process.Pid, sig)
	}
}

func setTriggers(ctx context.Context, db *pgx.Conn, on bool) error {
	verb := "DISABLE"
	if on {
		verb = "ENABLE"
	}
	for _, tr := range feedTriggers {
		if _, err := db.Exec(ctx, fmt.Sprintf("ALTER TABLE listings %s TRIGGER %s", verb, tr)); err != nil {
			return err
		}
	}
	return nil
}

// sqlWrites runs the writers for the run's duration, each on its own
// connection, each write one UPDATE of one random listing in its own
// transaction, and watches the feed meanwhile. Once the writers stop it
// calls resume, then waits for the backlog to drain.
func (l *lab) sqlWrites(ctx context.Context, db *pgx.Conn, triggers bool, resume func()) (writeRun, error) {
	run := writeRun{triggers: triggers}
	wctx, stop := context.WithTimeout(ctx, l.opts.feedDuration)
	defer stop()
	var (
		mu        sync.Mutex
		latencies []time.Duration
		wg        sync.WaitGroup
		failed    atomic.Value
	)
	for range l.opts.writers {
		conn, err := pgx.Connect(ctx, l.dbURL)
		if err != nil {
			return run, err
		}
		wg.Go(func() {
			defer conn.Close(context.Background())
			var mine []time.Duration
			for wctx.Err() == nil {
				id := 1 + rand.IntN(l.opts.listings)
				began := time.Now()
				if _, err := conn.Exec(wctx, `UPDATE listings SET document = document WHERE id = $1`, id); err != nil {
					if wctx.Err() == nil {
						failed.Store(err)
					}
					break
				}
				mine = append(mine, time.Since(began))
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			mu.Unlock()
		})
	}
	began := time.Now()
	watch := time.NewTicker(100 * time.Millisecond)
	defer watch.Stop()
	for wctx.Err() == nil {
		select {
		case <-wctx.Done():
		case <-watch.C:
			if err := run.observe(ctx, db); err != nil {
				return run, err
			}
		}
	}
	wg.Wait()
	elapsed := time.Since(began)
	if err, ok := failed.Load().(error); ok {
		return run, fmt.Errorf("a writer failed: %w", err)
	}
	resume()
	if triggers {
		if err := run.observe(ctx, db); err != nil {
			return run, err
		}
		stopped := time.Now()
		for {
			rows, err := run.backlog(ctx, db)
			if err != nil {
				return run, err
			}
			if rows == 0 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		run.drain = time.Since(stopped)
	}
	slices.Sort(latencies)
	run.writes = len(latencies)
	run.throughput = float64(len(latencies)) / elapsed.Seconds()
	if len(latencies) > 0 {
		run.p50, run.p99 = latencies[len(latencies)/2], latencies[len(latencies)*99/100]
	}
	return run, nil
}

func (r *writeRun) backlog(ctx context.Context, db *pgx.Conn) (int64, error) {
	var rows int64
	err := db.QueryRow(ctx, `SELECT count(*) FROM listing_changes WHERE applied_at IS NULL`).Scan(&rows)
	return rows, err
}

// observe records the peaks: the backlog and its age by the database's
// clock (as gateway_feed_lag_seconds), and the table's size. It runs every
// 100 ms in both arms, so it must cost the writers next to nothing: the
// sizes are spans of seq read from the ends of the primary key and of the
// index of pending records (rows pruned or rolled back inside a span count
// too), not counts, which scan a table of hundreds of thousands of rows
// (counting every 100 ms took a measurable share of the 2 cores from the
// trigger's arm only).
func (r *writeRun) observe(ctx context.Context, db *pgx.Conn) error {
	var rows, table, lagMillis int64
	err := db.QueryRow(ctx, `WITH ends AS (SELECT (SELECT min(seq) FROM listing_changes) AS first,
				(SELECT max(seq) FROM listing_changes) AS last),
			oldest AS (SELECT seq, changed_at FROM listing_changes
				WHERE done_at IS NULL AND applied_at IS NULL ORDER BY seq LIMIT 1)
		SELECT COALESCE((SELECT ends.last - oldest.seq + 1 FROM ends, oldest), 0),
			COALESCE((SELECT last - first + 1 FROM ends), 0),
			COALESCE((SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - changed_at FROM oldest), 0)`).
		Scan(&rows, &table, &lagMillis)
	if err != nil {
		return err
	}
	r.peakBacklog = max(r.peakBacklog, rows)
	r.peakTable = max(r.peakTable, table)
	r.peakLag = max(r.peakLag, time.Duration(lagMillis)*time.Millisecond)
	return nil
}

// ownPuts times n PUTs through gateway s, one after another.
func (l *lab) ownPuts(ctx context.Context, s *server, n int) ([]time.Duration, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	var out []time.Duration
	for i := range n {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, fmt.Sprintf("http://%s/realty/%d", s.addr, 2+i%100),
			strings.NewReader(fmt.Sprintf(`{"title":"put %d","categoryId":1,"location":{"cityId":34}}`, i)))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+l.token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "bench")
		began := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("PUT: %d", resp.StatusCode)
		}
		out = append(out, time.Since(began))
	}
	return out, nil
}

func feedReport(opts options, runs []writeRun, puts map[bool][]time.Duration) string {
	var w strings.Builder
	fmt.Fprintf(&w, "## The change feed's cost to writers (%s)\n\n", time.Now().UTC().Format("2006-01-02"))
	fmt.Fprintf(&w, "`go run ./deploy/bench -feed -reps %d -feed-duration %v -feed-writers %d`: %d listings in PostgreSQL, "+
		"two gateways with the feed on; %d writers, each `UPDATE listings SET document = document WHERE id = <random>` "+
		"in its own transaction, for %v with the triggers disabled and enabled in turn.\n\n",
		opts.reps, opts.feedDuration, opts.writers, opts.listings, opts.writers, opts.feedDuration)
	w.WriteString("| round | trigger | consumer | writes/s | p50 | p99 | peak lag | peak backlog¹ | peak table rows¹ | drain |\n|---:|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	var on, alone, off []float64
	var onP99, aloneP99, offP99 []time.Duration
	for i, r := range runs {
		trig, consumer, extra := "off", "idle", "| | | | |"
		switch {
		case r.triggers && r.paused:
			trig, consumer = "on", "paused, then drains"
			alone, aloneP99 = append(alone, r.throughput), append(aloneP99, r.p99)
		case r.triggers:
			trig, consumer = "on", "applying"
			on, onP99 = append(on, r.throughput), append(onP99, r.p99)
		default:
			off, offP99 = append(off, r.throughput), append(offP99, r.p99)
		}
		if r.triggers {
			extra = fmt.Sprintf("| %s | %d | %d | %s |", ms(r.peakLag), r.peakBacklog, r.peakTable, ms(r.drain))
		}
		fmt.Fprintf(&w, "| %d | %s | %s | %.0f | %s | %s %s\n", i/3+1, trig, consumer, r.throughput, ms(r.p50), ms(r.p99), extra)
	}
	w.WriteString("\n¹ Spans of `seq` (the newest record's less the oldest pending or oldest kept), sampled every 100 ms in both arms; counting instead would scan the table.\n")
	fmt.Fprintf(&w, "\nThe trigger alone (gateways paused): **%.2f×** the writes/s of no trigger (medians %.0f and %.0f), p99 %s against %s. "+
		"With the consumer applying on the same cores: **%.2f×** (%.0f writes/s), p99 %s.\n\n",
		medianF(alone)/medianF(off), medianF(alone), medianF(off), ms(medianD(aloneP99)), ms(medianD(offP99)),
		medianF(on)/medianF(off), medianF(on), ms(medianD(onP99)))
	fmt.Fprintf(&w, "The gateway's own PUTs (%d each way, one at a time, through one gateway): p50 %s and p99 %s with the triggers on, "+
		"p50 %s and p99 %s off.\n", len(puts[true]), ms(quantile(puts[true], 50)), ms(quantile(puts[true], 99)),
		ms(quantile(puts[false], 50)), ms(quantile(puts[false], 99)))
	return w.String()
}

func medianF(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func medianD(v []time.Duration) time.Duration { return quantile(v, 50) }

func quantile(v []time.Duration, q int) time.Duration {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(len(s)*q/100, len(s)-1)]
}
