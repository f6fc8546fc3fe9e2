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
