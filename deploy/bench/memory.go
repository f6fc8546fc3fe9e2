package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The memory case (-memory), as a user's traffic would fill a gateway:
// -memory-listings different listings of about 1.7 KB (ids from
// memoryBase+1, in PostgreSQL and in the embedded store), one gateway with
// the defaults, every listing read once by 8 concurrent clients. With Redis
// configured, Redis holds every listing first (a gateway with no local
// tier reads them all once before), so that the walk reads Redis as the
// fleet's traffic would; embedded, every read is a store read. Reported:
// RSS and go_memstats_heap_inuse_bytes of the idle gateway (the baseline),
// right after the walk, its peaks, and 5 s later.

const (
	memoryBase    = 10_000_000
	memoryClients = 8
	// memoryPhotos makes a listing's response about 1.7 KB.
	memoryPhotos = 3
	// The targets.
	rssTargetMiB = 150
	heapSlack    = 0.20
)

type memSample struct {
	rssKiB   int64
	heap     float64 // go_memstats_heap_inuse_bytes
	budget   float64 // gateway_cache_local_budget_bytes
	goMemLim float64 // go_gc_gomemlimit_bytes, where the runtime exports it
}

type memRun struct {
	mode              string
	idle, after, late memSample
	peakRSSKiB        int64
	peakHeap          float64
	reads, failed     int64
	bodyBytes         int64
	walk              time.Duration
	tiers             tiers
}

func (l *lab) memory(ctx context.Context, w *strings.Builder) error {
	n := l.opts.memoryListings
	from, to := memoryBase+1, memoryBase+n
	photos := func(int) int { return memoryPhotos }
	if err := l.importPG(ctx, from, to, photos); err != nil {
		return err
	}
	// An embedded store of its own, which no other gateway of the run uses.
	log.Printf("importing listings %d..%d into an embedded store", from, to)
	if _, err := l.admin(ctx, l.sqliteEnv("memory.db"), nil, "firm", "add", "--name", "Bench Realty"); err != nil {
		return err
	}
	if _, err := l.admin(ctx, l.sqliteEnv("memory.db"), nil, "user", "add", "--firm", "1", "--email", "bench@bench.example"); err != nil {
		return err
	}
	if err := l.importSQLite(ctx, "memory.db", from, to, photos); err != nil {
		return err
	}
	prefix := l.prefix + "mem:"
	var runs []memRun
	for _, mode := range []struct {
		name      string
		redisless bool
		env       []string
	}{
		{"Redis configured (PostgreSQL)", false, nil},
		{"embedded (SQLite, no Redis)", true, []string{"GATEWAY_STORE_URL=sqlite:" + filepath.Join(l.work, "memory.db"), "GATEWAY_REDIS_URL="}},
	} {
		if !mode.redisless {
			if err := l.flushPrefix(ctx, prefix); err != nil {
				return err
			}
			log.Printf("memory: filling Redis with the %d listings", n)
			warm, err := l.startGateway(ctx, "memory-warm", false, prefix, "GATEWAY_LOCAL_CACHE_BYTES=0")
			if err != nil {
				return err
			}
			if l.token == "" {
				if err := l.login(); err != nil {
					return err
				}
			}
			_, failed, _, err := l.walk(ctx, warm, from, to)
			l.stopServer(warm)
			if err != nil {
				return err
			}
			if failed > 0 {
				return fmt.Errorf("memory: %d reads failed while filling Redis", failed)
			}
		}
		log.Printf("memory: %s", mode.name)
		r, err := l.memoryRun(ctx, mode.name, prefix, mode.redisless, from, to, mode.env...)
		if err != nil {
			return err
		}
		runs = append(runs, r)
	}
	l.memoryReport(w, runs)
	return nil
}

func (l *lab) memoryRun(ctx context.Context, mode, prefix string, redisless bool, from, to int, extra ...string) (memRun, error) {
	r := memRun{mode: mode}
	s, err := l.startGateway(ctx, "memory", false, prefix, extra...)
	if err != nil {
		return r, err
	}
	defer l.stopServer(s)
	if l.token == "" {
		if err := l.login(); err != nil {
			return r, err
		}
	}
	time.Sleep(2 * time.Second) // idle: what starting allocated settles
	if r.idle, err = l.memSample(s); err != nil {
		return r, err
	}
	st0, err := cacheStats(s)
	if err != nil {
		return r, err
	}
	stop := make(chan struct{})
	var peakRSS atomic.Int64
	var peakHeap atomic.Uint64 // bytes
	var sampler sync.WaitGroup
	sampler.Go(func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if m, err := l.memSample(s); err == nil {
					peakRSS.Store(max(peakRSS.Load(), m.rssKiB))
					peakHeap.Store(max(peakHeap.Load(), uint64(m.heap)))
				}
			}
		}
	})
	began := time.Now()
	r.reads, r.failed, r.bodyBytes, err = l.walk(ctx, s, from, to)
	r.walk = time.Since(began)
	close(stop)
	sampler.Wait()
	if err != nil {
		return r, err
	}
	if r.after, err = l.memSample(s); err != nil {
		return r, err
	}
	st1, err := cacheStats(s)
	if err != nil {
		return r, err
	}
	r.tiers = tiersOf(st0, st1, redisless)
	time.Sleep(5 * time.Second)
	if r.late, err = l.memSample(s); err != nil {
		return r, err
	}
	r.peakRSSKiB = max(rssKiB(s.cmd.Process.Pid, "VmHWM"), peakRSS.Load())
	r.peakHeap = max(float64(peakHeap.Load()), r.after.heap, r.late.heap)
	return r, nil
}

// walk reads listings from..to once each through s, from memoryClients
// clients at once, and counts the reads, the failed ones and the bytes.
func (l *lab) walk(ctx context.Context, s *server, from, to int) (reads, failed, bytes int64, err error) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: memoryClients, MaxConnsPerHost: memoryClients}}
	defer client.CloseIdleConnections()
	var next atomic.Int64
	next.Store(int64(from) - 1)
	var wg sync.WaitGroup
	var errOnce atomic.Value
	for range memoryClients {
		wg.Go(func() {
			for ctx.Err() == nil {
				id := next.Add(1)
				if id > int64(to) {
					return
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.addr+"/realty/"+strconv.FormatInt(id, 10), nil)
				req.Header.Set("Authorization", "Bearer "+l.token)
				resp, err := client.Do(req)
				if err != nil {
					errOnce.CompareAndSwap(nil, err)
					atomic.AddInt64(&failed, 1)
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				atomic.AddInt64(&reads, 1)
				atomic.AddInt64(&bytes, int64(len(body)))
				if resp.StatusCode != http.StatusOK {
					errOnce.CompareAndSwap(nil, fmt.Errorf("listing %d: status %d: %.300s", id, resp.StatusCode, body))
					atomic.AddInt64(&failed, 1)
				}
			}
		})
	}
	wg.Wait()
	e, ok := errOnce.Load().(error)
	if ok {
		log.Printf("walk through %s: %d of %d reads failed, the first: %v", s.name, failed, reads, e)
	}
	if ok && failed > int64(to-from+1)/100 {
		return reads, failed, bytes, fmt.Errorf("walk through %s: %d failed: %w", s.name, failed, e)
	}
	return reads, failed, bytes, ctx.Err()
}

// memSample reads the gateway's RSS from /proc and its heap from /metrics.
func (l *lab) memSample(s *server) (memSample, error) {
	m := memSample{rssKiB: rssKiB(s.cmd.Process.Pid, "VmRSS")}
	resp, err := http.Get("http://" + s.admin + "/metrics")
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_memstats_heap_inuse_bytes":
			m.heap = v
		case "gateway_cache_local_budget_bytes":
			m.budget = v
		case "go_gc_gomemlimit_bytes":
			m.goMemLim = v
		}
	}
	return m, sc.Err()
}

func (l *lab) memoryReport(w *strings.Builder, runs []memRun) {
	fmt.Fprintf(w, "\n## Memory: %d different listings read once each by %d concurrent clients, one gateway with the defaults\n\n",
		l.opts.memoryListings, memoryClients)
	w.WriteString("| mode | reads (failed) | mean body | walk | answered by | idle RSS | idle heap in use | RSS after | peak RSS | RSS 5 s later | heap in use after | peak heap | heap 5 s later | local budget | GOMEMLIMIT |\n" +
		"|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range runs {
		local, redis, store := r.tiers.shares()
		mean := int64(0)
		if r.reads > 0 {
			mean = r.bodyBytes / r.reads
		}
		fmt.Fprintf(w, "| %s | %d (%d) | %d B | %.1f s | local %s, Redis %s, store %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.mode, r.reads, r.failed, mean, r.walk.Seconds(), pct(local), pct(redis), pct(store),
			mib(r.idle.rssKiB<<10), mb(r.idle.heap), mib(r.after.rssKiB<<10), mib(r.peakRSSKiB<<10), mib(r.late.rssKiB<<10),
			mb(r.after.heap), mb(r.peakHeap), mb(r.late.heap), mb(r.idle.budget), mb(r.idle.goMemLim))
	}
	w.WriteString("\n| target | value | verdict |\n|---|---:|---|\n")
	for _, r := range runs {
		verdict := "met"
		if r.peakRSSKiB>>10 >= rssTargetMiB {
			verdict = "missed"
		}
		fmt.Fprintf(w, "| %s: peak RSS under %d MiB | %s | %s |\n", r.mode, rssTargetMiB, mib(r.peakRSSKiB<<10), verdict)
		bound := (r.idle.budget + r.idle.heap) * (1 + heapSlack)
		for _, h := range []struct {
			when string
			v    float64
		}{{"after the walk", r.after.heap}, {"at its peak", r.peakHeap}} {
			verdict = "met"
			if h.v > bound {
				verdict = "missed"
			}
			fmt.Fprintf(w, "| %s: heap in use %s within %d %% of budget + idle heap (≤ %s) | %s (%.2f× budget + idle) | %s |\n",
				r.mode, h.when, int(heapSlack*100), mb(bound), mb(h.v), h.v/(r.idle.budget+r.idle.heap), verdict)
		}
	}
	w.WriteString("\nRSS is the process's (VmRSS; peak VmHWM, or the highest sampled); heap in use is go_memstats_heap_inuse_bytes from /metrics, sampled every 200 ms during the walk. MiB = 2^20 bytes, MB = 10^6.\n")
}

func mib(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }

func mb(v float64) string {
	if v == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f MB", v/1e6)
}
