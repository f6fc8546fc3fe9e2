package platform

import (
	"log/slog"
	"math"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// memoryHeadroom is what the process needs beside its local tier: the
// runtime, connections, requests in flight. Measured with a full 64 MiB
// tier (go run ./deploy/bench -memory): 48 MiB keeps the heap's peak
// within 1.15× of the tier's budget plus the idle heap and the RSS under
// 140 MiB with the walk's time unchanged; 64 MiB let the peak reach 1.31×.
const memoryHeadroom = 48 << 20

// SetMemoryLimit gives the Go runtime a soft memory limit, so that the
// garbage collector works harder before the heap outgrows it, unless the
// operator set GOMEMLIMIT: 90 % of the container's memory limit (cgroup v1
// or v2) where there is one, else the local tier's budget plus
// memoryHeadroom. Without a limit the heap may reach twice what is live
// (GOGC=100) before a collection: a full 64 MiB tier would take the RSS
// well past the tier's budget. It returns the limit set, 0 for none.
func SetMemoryLimit(localBytes int64, log *slog.Logger) int64 {
	if _, set := os.LookupEnv("GOMEMLIMIT"); set {
		return debug.SetMemoryLimit(-1)
	}
	limit, err := memlimit.Set(memlimit.WithRatio(0.9), memlimit.WithProvider(memlimit.FromCgroup), memlimit.WithLogger(log))
	if err == nil && limit != math.MaxInt64 {
		log.Info("memory limit from the container", "bytes", limit)
		return limit
	}
	if localBytes <= 0 {
		return 0
	}
	limit = localBytes + memoryHeadroom
	debug.SetMemoryLimit(limit)
	log.Info("memory limit from the local tier's budget", "bytes", limit)
	return limit
}
