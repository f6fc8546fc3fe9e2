package main

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// idleCase is one store and cache setting that idleBench measures, with
// a consumer of the change feed and a second gateway on the same store.
type idleCase struct {
	name   string
	sqlite bool
	redis  bool
}

// idleUse is what one gateway used while no request came.
type idleUse struct {
	ticks      int64 // utime + stime, in clock ticks
	writeBytes int64 // /proc/PID/io write_bytes
}

// idleBench starts, for each case, a consumer and a non-consumer on a
// fresh store, lets them settle, and measures their CPU ticks and the
// SQLite file's writes while no request comes (issue 26 §4).
func idleBench(ctx context.Context, opts options, root, work string) (string, error) {
	l := &lab{work: work, root: root, opts: opts, servers: map[string]*server{}}
	defer l.stopAll()
	l.redisAddr = envOr("GATEWAY_TEST_REDIS_ADDR", "127.0.0.1:6379")
	l.prefix = "bench:" + randomHex(4) + ":"
	if err := l.build(ctx); err != nil {
		return "", err
	}
	if err := l.createDatabase(ctx); err != nil {
		return "", err
	}
	cases := []idleCase{
		{"SQLite + Redis", true, true}, {"SQLite", true, false},
		{"PostgreSQL + Redis", false, true}, {"PostgreSQL", false, false},
	}
	var w strings.Builder
	fmt.Fprintf(&w, "## Idle\n\n`go run ./deploy/bench -idle -idle-duration %s`: two gateways on one store, no requests;\n", opts.idleDuration)
	fmt.Fprintf(&w, "CPU ticks (utime + stime, 1 tick = 10 ms) over %s after %s to settle; %% of one core.\n\n", opts.idleDuration, idleSettle)
	w.WriteString("| case | consumer ticks | consumer CPU | other ticks | other CPU | SQLite file changes | write_bytes (consumer, other) |\n|---|---|---|---|---|---|---|\n")
	var profiles strings.Builder
	for i, c := range cases {
		row, err := l.idleCase(ctx, c, i, opts.idleDuration, &profiles)
		if err != nil {
			return w.String(), fmt.Errorf("%s: %w", c.name, err)
		}
		w.WriteString(row)
		log.Print(strings.TrimSpace(row))
	}
	w.WriteString(profiles.String())
	return w.String(), nil
}

// idleSettle is how long the gateways run before the measurement: the
// feed is taken and the first polls are done.
const idleSettle = 5 * time.Second

// idleCase measures one case and returns its row; with -profile it then
// records both gateways for d more and writes their profiles to profiles.
func (l *lab) idleCase(ctx context.Context, c idleCase, n int, d time.Duration, profiles *strings.Builder) (string, error) {
	file := filepath.Join(l.work, fmt.Sprintf("idle-%d.db", n))
	var extra []string
	if c.sqlite {
		extra = append(extra, "GATEWAY_STORE_URL=sqlite:"+file)
	}
	if !c.redis {
		extra = append(extra, "GATEWAY_REDIS_URL=")
	}
	prefix := fmt.Sprintf("%sidle%d:", l.prefix, n)
	first, err := l.startGateway(ctx, fmt.Sprintf("idle-%d-a", n), false, prefix, extra...)
	if err != nil {
		return "", err
	}
	defer l.stopServer(first)
	time.Sleep(time.Second) // the first takes the feed
	second, err := l.startGateway(ctx, fmt.Sprintf("idle-%d-b", n), false, prefix, extra...)
	if err != nil {
		return "", err
	}
	defer l.stopServer(second)
	time.Sleep(idleSettle)

	var files []string
	if c.sqlite {
		files = []string{file, file + "-wal", file + "-shm"}
	}
	changes := make(chan int, 1)
	stop := make(chan struct{})
	var watching sync.WaitGroup
	watching.Go(func() { changes <- watchFiles(files, stop) })
	before := map[*server]idleUse{first: idleUseOf(first), second: idleUseOf(second)}
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(d):
	}
	after := map[*server]idleUse{first: idleUseOf(first), second: idleUseOf(second)}
	close(stop)
	watching.Wait()
	fileChanges := "-"
	if c.sqlite {
		fileChanges = strconv.Itoa(<-changes)
	}
	consumer, other := first, second
	if !consumes(first) && consumes(second) {
		consumer, other = second, first
	}
	if !consumes(consumer) {
		return "", fmt.Errorf("neither gateway reports gateway_feed_consumer 1")
	}
	ticks := func(s *server) int64 { return after[s].ticks - before[s].ticks }
	share := func(s *server) string {
		return fmt.Sprintf("%.2f %%", float64(ticks(s))/clockTicks/d.Seconds()*100)
	}
	written := func(s *server) int64 { return after[s].writeBytes - before[s].writeBytes }
	if l.opts.profile && l.opts.profileSet {
		if err := l.idleProfiles(ctx, profiles, c.name, map[string]*server{"consumer": consumer, "other": other}, d); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("| %s | %d | %s | %d | %s | %s | %d B, %d B |\n", c.name, ticks(consumer), share(consumer), ticks(other), share(other),
		fileChanges, written(consumer), written(other)), nil
}

// idleUseOf reads a gateway's ticks and disk writes.
func idleUseOf(s *server) idleUse {
	var u idleUse
	pid := s.cmd.Process.Pid
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		str := string(b)
		fields := strings.Fields(str[strings.LastIndexByte(str, ')')+2:])
		if len(fields) > 12 {
			ut, _ := strconv.ParseInt(fields[11], 10, 64)
			st, _ := strconv.ParseInt(fields[12], 10, 64)
			u.ticks = ut + st
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid)); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "write_bytes:"); ok {
				u.writeBytes, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			}
		}
	}
	return u
}

// consumes reports whether a gateway says it consumes the feed.
func consumes(s *server) bool {
	resp, err := http.Get("http://" + s.admin + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() == "gateway_feed_consumer 1" {
			return true
		}
	}
	return false
}

// watchFiles counts the changes of the files' size or modification time,
// looked at every 20 ms, until stop closes.
func watchFiles(files []string, stop <-chan struct{}) int {
	state := func() string {
		var b strings.Builder
		for _, f := range files {
			if fi, err := os.Stat(f); err == nil {
				fmt.Fprintf(&b, "%d/%d;", fi.Size(), fi.ModTime().UnixNano())
			}
		}
		return b.String()
	}
	last, n := state(), 0
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return n
		case <-t.C:
			if s := state(); s != last {
				last, n = s, n+1
			}
		}
	}
}

// idlePerfFreq is the sampling rate of an idle profile: an idle gateway
// runs for a few milliseconds a second.
const idlePerfFreq = 9999

// idleProfiles records the idle gateways with perf at once for d, after
// the measurement, and writes the top of each profile to w.
func (l *lab) idleProfiles(ctx context.Context, w *strings.Builder, name string, servers map[string]*server, d time.Duration) error {
	log.Printf("profiling %s for %v", name, d)
	recs := map[string]*exec.Cmd{}
	for role, s := range servers {
		rec, err := startPerf(ctx, s, filepath.Join(l.work, s.name+".perf.data"), idlePerfFreq, d)
		if err != nil {
			return err
		}
		recs[role] = rec
	}
	for _, role := range []string{"consumer", "other"} {
		if err := waitPerf(recs[role]); err != nil {
			return err
		}
		flat, cum, err := l.perfTops(ctx, filepath.Join(l.work, servers[role].name+".perf.data"))
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "\n### Profile of %s, %s (perf -F %d -g, %v idle, the gateway's process: by self time, then with callees)\n\n```\n%s\n```\n\n```\n%s\n```\n",
			name, role, idlePerfFreq, d, strings.Join(flat, "\n"), strings.Join(cum, "\n"))
	}
	return nil
}
