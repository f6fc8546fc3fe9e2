package cache

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/coding"
	"github.com/realty-gateway/gateway/upstream"
)

// everySource answers any id with the same listing under that id, at no
// cost: what remains of a miss is the cache's own work.
type everySource struct {
	*source
	template upstream.Encoded
}

func (s everySource) EncodedByID(_ context.Context, id int64) (upstream.Encoded, error) {
	e := s.template
	e.ID, e.No = id, id
	return e, nil
}

// BenchmarkMiss is a cold read through a running Redis cache whose store
// answers at once: the look at Redis, the lease, the fill of both keys
// and the local copy. cpu-µs/op is the process's CPU per miss.
func BenchmarkMiss(b *testing.B) {
	rdb, prefix := redisFor(b)
	tmpl, err := upstream.Encode(fullListing())
	if err != nil {
		b.Fatal(err)
	}
	src := everySource{source: newSource(), template: tmpl}
	c := must(b)(NewRedis(rdb, testRedisTimeout, testConfig(), testDeps(src, prefix)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	<-c.Subscribed()
	// A request's context, as the gateway's: its deadline outlasts the
	// load's bound, so the flight runs on the caller's goroutine.
	ctx, cancelRequests := context.WithTimeout(ctx, time.Hour)
	defer cancelRequests()
	var next atomic.Int64
	b.ReportAllocs()
	before := cpuTime()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if e, err := c.Get(ctx, ByID(next.Add(1)), coding.Identity, time.Now()); err != nil || e.State != Miss {
				b.Error(e.State, err)
				return
			}
		}
	})
	b.ReportMetric(float64((cpuTime()-before).Microseconds())/float64(b.N), "cpu-µs/op")
}

// cpuTime is the process's user and system CPU so far.
func cpuTime() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
