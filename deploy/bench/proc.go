package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is the kernel's USER_HZ on Linux.
const clockTicks = 100

// tree lists pid and its descendants: nginx and varnishd work in children.
func tree(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", out[i]))
		for _, task := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", out[i], task.Name()))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if child, err := strconv.Atoi(f); err == nil {
					out = append(out, child)
				}
			}
		}
	}
	return out
}

// cpuSeconds is the user and system CPU time of pid's tree.
func cpuSeconds(pid int) float64 { return cpuSecondsOf(tree(pid)) }

// rssKiB sums a status field (VmRSS, VmHWM) over pid's tree.
func rssKiB(pid int, field string) int64 {
	var total int64
	for _, p := range tree(pid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, field+":"); ok {
				n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				total += n
			}
		}
	}
	return total
}

// pidsOf lists the processes whose command is name: PostgreSQL's backends.
func pidsOf(name string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(b)) == name {
			out = append(out, pid)
		}
	}
	return out
}

// cpuSecondsOf sums the user and system CPU time of pids.
func cpuSecondsOf(pids []int) float64 {
	var s float64
	for _, p := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		str := string(b)
		fields := strings.Fields(str[strings.LastIndexByte(str, ')')+2:])
		if len(fields) > 12 {
			u, _ := strconv.ParseInt(fields[11], 10, 64)
			k, _ := strconv.ParseInt(fields[12], 10, 64)
			s += float64(u+k) / clockTicks
		}
	}
	return s
}

// cpuByPid is the user and system CPU time of each of pids.
func cpuByPid(pids []int) map[int]float64 {
	out := make(map[int]float64, len(pids))
	for _, p := range pids {
		out[p] = cpuSecondsOf([]int{p})
	}
	return out
}

// cpuSince is the CPU time spent between two cpuByPid readings; a process
// that started in between counts from zero.
func cpuSince(before, after map[int]float64) float64 {
	var s float64
	for p, v := range after {
		s += v - before[p]
	}
	return s
}

// pgBackends lists PostgreSQL's backends connected to database db: their
// title is "postgres: CLUSTER: USER DB HOST(PORT) STATE". PostgreSQL may
// serve others meanwhile, whose work does not count.
func pgBackends(db string) []int {
	var out []int
	for _, pid := range pidsOf("postgres") {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		fields := strings.Fields(strings.ReplaceAll(string(b), "\x00", " "))
		if len(fields) > 3 && fields[0] == "postgres:" && fields[3] == db {
			out = append(out, pid)
		}
	}
	return out
}

// usage reads the CPU of the processes a run involves: the server's tree,
// the run database's PostgreSQL backends and Redis.
type usage struct {
	server   float64
	postgres map[int]float64
	redis    float64
}

func (l *lab) usage(pids ...int) usage {
	var u usage
	for _, p := range pids {
		u.server += cpuSeconds(p)
	}
	u.postgres = cpuByPid(pgBackends(l.dbName))
	u.redis = cpuSecondsOf(pidsOf("redis-server"))
	return u
}

// spent is the CPU each used from u to v.
func (u usage) spent(v usage) (server, postgres, redis float64) {
	return v.server - u.server, cpuSince(u.postgres, v.postgres), v.redis - u.redis
}
