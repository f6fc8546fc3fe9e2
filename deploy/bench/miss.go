package main

import (
	"context"
	"fmt"
	"log"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The store misses (-miss): gateway-miss (no Redis, a one-byte local
// tier), gateway-miss-redis (the production shape: Redis configured but
// empty, the default local tier) and naive-miss (the naive composition:
// Fiber and contrib/jwt, one GET, the query, one SET), each request a
// listing not read before. Beside the server's CPU per miss (utime + stime
// of its process over the run, divided by the requests), the CPU of the
// run database's PostgreSQL backends and of Redis; then a profile of each
// with perf (the gateway serves no pprof), taken in a run of its own.

// missSection reports the misses of res (the main run's, or their own).
func (l *lab) missSection(ctx context.Context, w *strings.Builder, res map[string][]result) error {
	fmt.Fprintf(w, "\n## Store misses: every request a listing not read before (of %d), wrk -t2 -c%d -d%v, %d repetitions, medians\n\n",
		l.opts.listings, l.opts.conns, l.opts.duration, len(res[missCases[0]]))
	w.WriteString("| case | requests/s | p99 | store reads per request | server CPU per miss | PostgreSQL CPU per miss | Redis CPU per miss | PostgreSQL / server | errors, non-2xx |\n" +
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, name := range missCases {
		r := median(res[name])
		loads := 0.0
		if r.requests > 0 {
			loads = float64(r.tiers.loads) / float64(r.requests)
		}
		redis := us(r.redisPerRequest)
		if l.servers[name].redisless {
			redis = "—"
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %.2f | %s | %s | %s | %.2f× | %d, %d |\n", name, r.rps, ms(r.p99), loads,
			us(r.cpuPerRequest), us(r.pgPerRequest), redis, r.storeCPUShare, r.errors, r.non2xx)
	}
	for _, name := range missCases {
		if r := median(res[name]); r.requests > 0 && float64(r.tiers.loads) < 0.95*float64(r.requests) {
			fmt.Fprintf(w, "\n**%s: only %d of %d requests were store reads: the walk wrapped around the %d listings within a run; raise -listings.**\n",
				name, r.tiers.loads, r.requests, l.opts.listings)
		}
	}
	w.WriteString("\n| target | value | verdict |\n|---|---:|---|\n")
	missTargetRows(w, res)
	trusted := "—"
	if st, err := cacheStats(l.servers["gateway-miss-redis"]); err == nil {
		trusted = fmt.Sprint(st.RedisTrusted)
	}
	fmt.Fprintf(w, "\nPostgreSQL's CPU is its backends' connected to the run's database; Redis's is the whole server's (shared with whatever else uses it meanwhile). "+
		"gateway-miss-redis trusted Redis (the change feed vouched for it): %s.\n", trusted)
	if !l.opts.profile {
		return nil
	}
	if _, err := exec.LookPath("perf"); err != nil {
		w.WriteString("\nNo profile: perf is not installed, and the gateway serves no pprof.\n")
		return nil
	}
	for _, name := range missCases {
		if l.servers[name].naive { // a go run binary: perf finds no symbols
			continue
		}
		log.Printf("profiling %s", name)
		flat, cum, err := l.profile(ctx, l.servers[name], l.opts.duration)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "\n### Profile of %s (perf -F 999 -g, %v of wrk load, the server's process: by self time, then with callees)\n\n```\n%s\n```\n\n```\n%s\n```\n",
			name, l.opts.duration, strings.Join(flat, "\n"), strings.Join(cum, "\n"))
	}
	return nil
}

// profile records the gateway's process with perf while wrk loads it for
// d, and returns perf's top entries by self time and by time with callees.
func (l *lab) profile(ctx context.Context, s *server, d time.Duration) (flat, cum []string, err error) {
	data := filepath.Join(l.work, s.name+".perf.data")
	rec, err := startPerf(ctx, s, data, 999, d)
	if err != nil {
		return nil, nil, err
	}
	if _, err := l.load(ctx, s, l.opts.conns, d, false, ""); err != nil {
		_ = rec.Process.Kill()
		_ = rec.Wait()
		return nil, nil, err
	}
	if err := waitPerf(rec); err != nil {
		return nil, nil, err
	}
	return l.perfTops(ctx, data)
}

// startPerf starts recording s's process with perf for d (and half a
// second), at freq samples a second, into data, once perf has attached.
func startPerf(ctx context.Context, s *server, data string, freq int, d time.Duration) (*exec.Cmd, error) {
	secs := strconv.FormatFloat(d.Seconds()+0.5, 'f', 1, 64)
	rec := exec.CommandContext(ctx, "perf", "record", "-q", "-F", strconv.Itoa(freq), "-g", "-p", strconv.Itoa(s.cmd.Process.Pid), "-o", data, "--", "sleep", secs)
	var out strings.Builder
	rec.Stdout, rec.Stderr = &out, &out
	if err := rec.Start(); err != nil {
		return nil, err
	}
	time.Sleep(250 * time.Millisecond) // perf attaches
	return rec, nil
}

// waitPerf waits for a recording that startPerf started.
func waitPerf(rec *exec.Cmd) error {
	if err := rec.Wait(); err != nil {
		return fmt.Errorf("perf record: %w\n%s", err, rec.Stdout)
	}
	return nil
}

// perfTops returns a recording's top entries by self time and by time
// with callees.
func (l *lab) perfTops(ctx context.Context, data string) (flat, cum []string, err error) {
	report := func(children bool, n int) ([]string, error) {
		args := []string{"report", "-i", data, "--stdio", "--sort", "sym", "-g", "none", "--percent-limit", "0.1"}
		if children {
			args = append(args, "--children")
		} else {
			args = append(args, "--no-children")
		}
		out, err := exec.CommandContext(ctx, "perf", args...).Output()
		if err != nil {
			return nil, fmt.Errorf("perf report: %w", err)
		}
		var lines []string
		for line := range strings.Lines(string(out)) {
			line = goShape.ReplaceAllString(strings.TrimRight(line, "\n"), "[…]")
			t := strings.TrimSpace(line)
			if t == "" || strings.HasPrefix(t, "#") {
				continue
			}
			if children && skipFrame(t) {
				continue
			}
			lines = append(lines, line)
			if len(lines) == n {
				break
			}
		}
		return lines, nil
	}
	if flat, err = report(false, 12); err != nil {
		return nil, nil, err
	}
	cum, err = report(true, l.opts.profileLines)
	return flat, cum, err
}

// goShape is the type argument of a generic function's instance.
var goShape = regexp.MustCompile(`\[go\.shape\.[^\]]*\]`)

// skipFrame leaves out, from the list with callees, the frames that every
// sample of a goroutine or a system call passes through.
func skipFrame(line string) bool {
	for _, f := range []string{"runtime.goexit", "runtime.main", "runtime.mstart", "runtime.systemstack", "runtime.mcall",
		"entry_SYSCALL_64", "do_syscall_64", "x64_sys_call"} {
		if strings.HasSuffix(line, "] "+f) || strings.HasSuffix(line, "] "+f+".abi0") || strings.HasSuffix(line, "] "+f+"_after_hwframe") {
			return true
		}
	}
	return false
}
