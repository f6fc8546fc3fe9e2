package e2e

// Writes during a cold burst (cache/lease.go): listings that the fleet is
// loading under a lease are written, by PUT through the gateways and by
// SQL behind them, while every gateway's clients read them.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/realty-gateway/gateway/internal/testenv"
)

// TestEndToEndColdBurstWithWrites: four gateways, 8 clients each, read
// 40 cold listings once each while the first 8 are written 6 times each,
// by PUT through the gateways and by SQL behind them, the first write of
// each landing on its cold load (the store answers 1 s late while the
// leases are taken). Asserted: no read sent after a PUT returned, or
// after the feed applied an SQL write, shows an older version, on any
// gateway, in either form; no gateway goes back to an older version of a
// key it served; every read answers 200; at the end every gateway serves
// v6. The test fails where no load of an older version answered after a
// write returned. The scenario in full: docs/testing.md, "Two lease tests
// with writes, in full".
func TestEndToEndColdBurstWithWrites(t *testing.T) {
	const (
		gateways, clients, listings = 4, 8, 40
		written, versions           = 8, 6
		checkers                    = 2 // per gateway, on the written listings until the last write
		slow                        = time.Second
		storeTimeout, redisTimeout  = 5 * time.Second, time.Second
	)
	// A holder's read through the slow store may open a connection first
	// (two slow answers): the store's timeout leaves room for that, and the
	// request's deadline for a waiter's longest wait and a load of its own
	// (as in TestEndToEndLeaseHolderKilled).
	loadTimeout := storeTimeout + 3*redisTimeout
	requestTimeout := loadTimeout + storeTimeout + 2*time.Second
	f := newColdFleet(t, gateways, listings, environment{"GATEWAY_STORE_TIMEOUT": storeTimeout.String(),
		"GATEWAY_REQUEST_TIMEOUT": requestTimeout.String(), "GATEWAY_WRITE_TIMEOUT": (2 * requestTimeout).String()})
	firm := f.w.firm
	paths := func(i int) [2]string {
		return [2]string{fmt.Sprintf("/realty/%d", burstFirstID+i), fmt.Sprintf("/realty/%d-%d", firm, 1001+i)}
	}
	leased := func(i int) (n int) {
		for _, name := range listingKeys(f.prefix, int64(burstFirstID+i), firm, int64(1001+i)) {
			if f.rdb.Exists(context.Background(), "{"+name+"}:lease").Val() == 1 {
				n++
			}
		}
		return n
	}
	filled := func(i int) (n int) {
		for _, name := range listingKeys(f.prefix, int64(burstFirstID+i), firm, int64(1001+i)) {
			if f.rdb.Exists(context.Background(), name).Val() == 1 {
				n++
			}
		}
		return n
	}

	// Version v of listing i is written by PUT or by SQL, in turn; half of
	// the listings start with each.
	byPUT := func(i, v int) bool { return (i+v)%2 == 1 }
	wrote := func(i, v int) string {
		if byPUT(i, v) {
			return "a PUT that returned"
		}
		return "an UPDATE in SQL that the feed applied"
	}

	// floor[i]: the last version of listing i that a reader must see, the
	// last returned PUT or applied SQL write. seen[g][i][form]: the newest
	// version a finished read of that view showed.
	var (
		floor      [written]atomic.Int64
		seen       [gateways][written][2]atomic.Int64
		overlapped [written]atomic.Int64
		answered   atomic.Int64
		mu         sync.Mutex
		bad        []string // the first wrong or stale answers
		nBad       int
	)
	report := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if nBad++; len(bad) < 10 {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
	}
	raise := func(a *atomic.Int64, v int64) {
		for {
			cur := a.Load()
			if v <= cur || a.CompareAndSwap(cur, v) {
				return
			}
		}
	}
	read := func(g, i, form int) {
		var least, viewLeast int64
		if i < written {
			least, viewLeast = floor[i].Load(), seen[g][i][form].Load()
		}
		path := paths(i)[form]
		began := time.Now()
		v, r, problem := readVersion(f.ps[g], path, f.tok, int64(burstFirstID+i))
		answered.Add(1)
		if problem == "" && i >= written && v != 0 {
			problem = fmt.Sprintf("title v%d", v)
		}
		if problem != "" {
			report("%s on gateway %d: %s", path, g, problem)
			return
		}
		if i >= written {
			return
		}
		switch {
		case v < least:
			report("%s on gateway %d, sent %s after v%d (%s), shows v%d", path, g, began.Format("15:04:05.000"), least, wrote(i, int(least)), v)
		case v < viewLeast:
			report("%s on gateway %d, sent %s after that view showed v%d, shows v%d", path, g, began.Format("15:04:05.000"), viewLeast, v)
		}
		if v >= least && v < floor[i].Load() && r.header.Get("Cache-Status") == "realty-gateway; fwd=miss" {
			overlapped[i].Add(1) // this gateway's store load read a version older than a write that returned meanwhile
		}
		raise(&seen[g][i][form], v)
	}

	// The writers' connections, straight to PostgreSQL, one per listing.
	conns := make([]*pgx.Conn, written)
	for i := range conns {
		c, err := pgx.Connect(context.Background(), f.pgURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		conns[i] = c
	}
	// write writes version v of listing i, by PUT or by SQL, and returns
	// once a reader must see it: the PUT returned, or the feed applied the
	// UPDATE.
	write := func(i, v int) error {
		ctx := context.Background()
		if byPUT(i, v) {
			g, path := (i+v)%gateways, paths(i)[(v/2)%2]
			r, err := send(f.ps[g], http.MethodPut, path, f.tok, fmt.Sprintf(`{"title":"v%d","categoryId":1,"location":{"cityId":6}}`, v))
			if err != nil || r.status != http.StatusOK {
				return fmt.Errorf("PUT v%d %s on gateway %d: %v %d %.200s", v, path, g, err, r.status, r.body)
			}
			return nil
		}
		return writeSQLVersion(ctx, conns[i], burstFirstID+int64(i), v)
	}

	before := f.storeReads(t, f.ps...)
	// The written listings' cold loads first: a read of each form of each,
	// on a gateway of its own, takes the lease (or, where the other form's
	// fill came first, finds the key filled), with the store slow.
	f.pg.SetLatency(slow)
	kicked := time.Now()
	var burst, readers sync.WaitGroup
	for i := range written {
		for form := range 2 {
			readers.Go(func() { read((i+form)%gateways, i, form) })
		}
	}
	leasedAtWrite := 0
	eventually(t, "a lease on, or a fill of, each form of the written listings", func() bool {
		leasedAtWrite = 0
		for i := range written {
			if n := leased(i); n+filled(i) < 2 {
				return false
			} else if n > 0 {
				leasedAtWrite++
			}
		}
		return true
	})
	// The burst: the other gateways' clients wait on those leases, and
	// load the other listings.
	for g := range f.ps {
		for c := range clients {
			burst.Go(func() {
				for _, i := range rand.Perm(listings) {
					form := 0 // by id, as the other bursts; the written listings in both forms
					if i < written {
						form = (c + i) % 2
					}
					read(g, i, form)
				}
			})
		}
	}
	// A holder's read of the store goes out after one or two slow answers
	// (pgx prepares a statement before its first use on a connection, and
	// pings an idle connection or opens a new one before that); most have
	// read v0 one slow answer after the kick (measured), and their answers
	// wait in the proxy until two. From a quarter of a slow answer later
	// the store is fast again, for the writes and the change feed, which
	// so return before those holders' fills of v0. A holder whose read
	// went out after that reads whatever was written by then. overlapped
	// counts the loads that answered a version older than a write that
	// had returned meanwhile.
	time.Sleep(time.Until(kicked.Add(slow + slow/4)))
	f.pg.SetLatency(0)
	writesDone := make(chan struct{})
	for g := range f.ps {
		for range checkers {
			readers.Go(func() {
				for {
					select {
					case <-writesDone:
						return
					default:
					}
					for _, i := range rand.Perm(written) {
						read(g, i, 0)
						read(g, i, 1)
					}
				}
			})
		}
	}
	var writers sync.WaitGroup
	errs := make(chan error, written)
	for i := range written {
		writers.Go(func() {
			for v := 1; v <= versions; v++ {
				if err := write(i, v); err != nil {
					errs <- err
					return
				}
				raise(&floor[i], int64(v))
				if v == 1 { // v1 meets the holders' fills of v0 alone, then the readers
					for began := time.Now(); leased(i) > 0; time.Sleep(5 * time.Millisecond) {
						if time.Since(began) > loadTimeout+testenv.Patience() {
							errs <- fmt.Errorf("listing %d still leased %v after its first write", burstFirstID+i, time.Since(began))
							return
						}
					}
					time.Sleep(50 * time.Millisecond)
				}
				time.Sleep(10 * time.Millisecond) // readers read each version
			}
		})
	}
	writers.Wait()
	close(writesDone)
	close(errs)
	burst.Wait()
	readers.Wait()
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	storeReads := f.storeReads(t, f.ps...) - before
	var coalesced uint64
	for _, p := range f.ps {
		coalesced += p.Stats(t).Cache.Coalesced
	}
	var overlaps []string
	for i := range written {
		if n := overlapped[i].Load(); n > 0 {
			first := "SQL"
			if byPUT(i, 1) {
				first = "PUT"
			}
			overlaps = append(overlaps, fmt.Sprintf("%d (%s first, %d answers)", burstFirstID+i, first, n))
		}
	}
	t.Logf("%d reads of %d cold listings on %d gateways, %d of them written %d times each, %d of those under a lease after the first reads; "+
		"store loads that answered a version older than a write that had returned: %v; %.0f store reads (the PUTs' own included), %d answered by another gateway's lease",
		answered.Load(), listings, gateways, written, versions, leasedAtWrite, overlaps, storeReads, coalesced)
	if nBad > 0 {
		t.Fatalf("%d of %d reads were wrong or older than what they must show; the first %d:\n%s", nBad, answered.Load(), len(bad), strings.Join(bad, "\n"))
	}
	if len(overlaps) == 0 {
		t.Fatal("no store load answered a version older than a write that had returned: the writes did not land on a cold load in flight")
	}
	for i := range written {
		for g, p := range f.ps {
			for _, path := range paths(i) {
				if got := titleOf(t, p.view(t, path, f.tok)); got != fmt.Sprintf("v%d", versions) {
					t.Errorf("%s on gateway %d after the last write: %q; want v%d", path, g, got, versions)
				}
			}
		}
	}
}
