package cache

import (
	"sync"

	"golang.org/x/sync/singleflight"
)

// queuedFlights shares loads of a key as singleflight does, except that a
// caller never joins a load that began before it arrived: it joins the
// next one, which begins when the load under way ends, and which every
// caller that arrived meanwhile shares. So at most two loads of a key run
// or wait at a time, and every answer comes from a store read that began
// after its caller asked.
//
// The cache uses it while it may miss other gateways' announcements
// (Redis not trusted): then a load under way may have read a version that
// a write elsewhere has replaced since, and nothing tells this gateway to
// forget it, as an announcement does for singleflight's flights.
type queuedFlights struct {
	mu sync.Mutex
	m  map[string]*queuedFlight // the flight under way, by key
}

type queuedFlight struct {
	fn      func() (any, error)
	callers []chan<- singleflight.Result
	next    *queuedFlight // the callers that arrived while this one ran
}

// doChan runs fn for key, or has the caller share the next run, and
// delivers the result on the channel it returns, as singleflight.DoChan.
func (g *queuedFlights) doChan(key string, fn func() (any, error)) <-chan singleflight.Result {
	ch := make(chan singleflight.Result, 1)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]*queuedFlight{}
	}
	f := g.m[key]
	if f == nil {
		f = &queuedFlight{fn: fn, callers: []chan<- singleflight.Result{ch}}
		g.m[key] = f
		go g.run(key, f)
		return ch
	}
	if f.next == nil {
		f.next = &queuedFlight{fn: fn}
	}
	f.next.callers = append(f.next.callers, ch)
	return ch
}

// run runs f, then the flights queued behind it.
func (g *queuedFlights) run(key string, f *queuedFlight) {
	for f != nil {
		v, err := f.fn()
		g.mu.Lock()
		callers, next := f.callers, f.next
		if next == nil {
			delete(g.m, key)
		} else {
			g.m[key] = next
		}
		g.mu.Unlock()
		for _, ch := range callers {
			ch <- singleflight.Result{Val: v, Err: err, Shared: len(callers) > 1}
		}
		f = next
	}
}
