package e2e

// The fleet's lease on a cold key (cache/lease.go) end to end: several
// gateway processes on one Redis and PostgreSQL, a burst of reads of
// listings that none of them holds, the store's reads counted from the
// gateways' own metrics; and the holder of the leases killed mid-load.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/faultproxy"
	"github.com/realty-gateway/gateway/internal/testenv"
)

// burstFirstID is the id of the first listing of a burst; its number is
// 1001 (importNumbered).
const burstFirstID = 5001

// coldFleet is n gateways on one Redis key prefix and one database of n
// listings (ids from burstFirstID, titled "v0"), every gateway on
// PostgreSQL through pg, with a reader's token, once the change feed has
// applied the import and every gateway trusts Redis; the listings' keys
// are then removed, so that every read of them starts cold. pgURL is the
// database itself, for writers behind the gateways (not through pg).
type coldFleet struct {
	ps     []*process
	w      world
	tok    string
	pg     *faultproxy.Proxy
	pgURL  string
	prefix string
	rdb    *redis.Client
}

func newColdFleet(t *testing.T, gateways, listings int, extra environment) *coldFleet {
	t.Helper()
	pgURL := testenv.PostgresURL(t)
	e, prefix := postgresEnv(t, pgURL, testenv.RedisAddr(t))
	f := &coldFleet{w: newWorld(t, e), prefix: prefix, pg: faultproxy.New(t, "127.0.0.1:5432"), pgURL: pgURL}
	importNumbered(t, e, f.w, burstFirstID, listings)
	e["GATEWAY_STORE_URL"] = strings.Replace(pgURL, "127.0.0.1:5432", f.pg.Addr(), 1)
	// A starved machine's Redis round trip can pass the 100 ms default
	// and open the Redis breaker, which turns the lease off: not what
	// these tests are about.
	e["GATEWAY_REDIS_TIMEOUT"] = "1s"
	maps.Copy(e, extra)
	for range gateways {
		f.ps = append(f.ps, start(t, maps.Clone(e)))
	}
	f.tok = f.ps[0].token(t, f.w.otpLogin())
	db, err := pgx.Connect(context.Background(), pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	eventually(t, "the feed applies the import and every gateway trusts Redis", func() bool {
		if unapplied(t, db) > 0 {
			return false
		}
		for _, p := range f.ps {
			if s, err := p.ReadStats(); err != nil || !s.Cache.RedisTrusted || !s.Cache.LocalTierOn {
				return false
			}
		}
		return true
	})
	f.rdb = redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { f.rdb.Close() })
	var keys []string
	for i := range listings {
		keys = append(keys, listingKeys(prefix, int64(burstFirstID+i), f.w.firm, int64(1001+i))...)
	}
	if err := f.rdb.Del(context.Background(), keys...).Err(); err != nil {
		t.Fatal(err)
	}
	return f
}

// storeReads sums the gateways' listing reads from the store: every
// outcome of gateway_store_requests_total's listing operations.
func (f *coldFleet) storeReads(t *testing.T, ps ...*process) float64 {
	t.Helper()
	var sum float64
	for _, p := range ps {
		for line := range strings.Lines(p.metrics(t)) {
			if !strings.HasPrefix(line, `gateway_store_requests_total{op="listing_by_id"`) &&
				!strings.HasPrefix(line, `gateway_store_requests_total{op="listing_by_number"`) {
				continue
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(line[strings.LastIndexByte(line, ' '):]), 64)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			sum += v
		}
	}
	return sum
}

// burstOutcome is what a burst's clients saw.
type burstOutcome struct {
	requests, wrong atomic.Int64
	slowest         atomic.Int64 // nanoseconds
	mu              sync.Mutex
	first           string // the first wrong answer
}

// burst runs clients clients on each of ps, each reading every listing
// of the fleet once, in an order of its own, by id; it returns when all
// have answered.
func (f *coldFleet) burst(ps []*process, clients, listings int) *burstOutcome {
	o := &burstOutcome{}
	var wg sync.WaitGroup
	for _, p := range ps {
		for range clients {
			wg.Go(func() {
				for _, i := range rand.Perm(listings) {
					o.read(p, f.tok, burstFirstID+i)
				}
			})
		}
	}
	wg.Wait()
	return o
}

// read reads listing id through p and records whether the answer was 200
// with that listing, and how long it took.
func (o *burstOutcome) read(p *process, tok string, id int) {
	began := time.Now()
	r, err := send(p, http.MethodGet, fmt.Sprintf("/realty/%d", id), tok, "")
	took := time.Since(began)
	o.requests.Add(1)
	for {
		s := o.slowest.Load()
		if int64(took) <= s || o.slowest.CompareAndSwap(s, int64(took)) {
			break
		}
	}
	var l struct {
		ID    int64  `json:"id"`
		Title string `json:"title"`
	}
	if err == nil && r.status == http.StatusOK && json.Unmarshal(r.body, &l) == nil && l.ID == int64(id) && l.Title == "v0" {
		return
	}
	o.wrong.Add(1)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.first == "" {
		o.first = fmt.Sprintf("listing %d: %d %v %.200s", id, r.status, err, r.body)
	}
}

func (o *burstOutcome) requireAllRight(t *testing.T) {
	t.Helper()
	if n := o.wrong.Load(); n > 0 {
		t.Fatalf("%d of %d reads were not 200 with the listing asked for; the first: %s", n, o.requests.Load(), o.first)
	}
}

// TestEndToEndColdBurstReadsTheStoreOncePerListing: four gateways, 16
// clients each, every client reading each of 50 cold listings once, in
// its own order, with the store answering 20 ms late (as a loaded store
// would: it widens the window in which the gateways miss together).
// Every read answers 200 with its listing, and the store is read about
// once per listing for the whole fleet. Without the lease the fleet reads
// it about twice per listing or more (deploy/bench -burst: 2.0 to 2.2 for
// the build before it), since each gateway's own flight loads it.
func TestEndToEndColdBurstReadsTheStoreOncePerListing(t *testing.T) {
	const gateways, clients, listings = 4, 16, 50
	f := newColdFleet(t, gateways, listings, nil)
	before := f.storeReads(t, f.ps...)
	f.pg.SetLatency(20 * time.Millisecond)
	o := f.burst(f.ps, clients, listings)
	f.pg.SetLatency(0)
	o.requireAllRight(t)
	reads := f.storeReads(t, f.ps...) - before
	var coalesced uint64
	for _, p := range f.ps {
		coalesced += p.Stats(t).Cache.Coalesced
	}
	t.Logf("%d reads of %d cold listings on %d gateways: %.0f store reads (%.2f per listing), %d answered by another gateway's lease, the slowest %v",
		o.requests.Load(), listings, gateways, reads, reads/listings, coalesced, time.Duration(o.slowest.Load()))
	// The bound leaves room for the reads that a busy machine lets
	// through (a gateway whose look at Redis precedes another's fill but
	// whose SET NX follows its release reads the store again), well
	// below what the fleet reads without the lease.
	if bound := 1.3 * listings; reads > bound {
		t.Fatalf("the store was read %.0f times for %d cold listings (%.2f per listing); want at most %.0f", reads, listings, reads/listings, bound)
	}
}

// TestEndToEndLeaseHolderKilled: the store answers 500 ms late; gateway 0
// starts loading 30 cold listings and takes their leases; the three other
// gateways' clients then ask for every one of them and wait on those
// leases; gateway 0 is killed (SIGKILL) with its loads in flight. Every
// read on the survivors answers 200 with its listing, none later than the
// lease's bound (the load timeout, GATEWAY_STORE_TIMEOUT plus three
// GATEWAY_REDIS_TIMEOUTs), plus a load of its own, plus patience for a
// busy machine: the point is that none fails or hangs. The timeouts make
// the lease's life (6 s) long enough to kill its holder mid-load on a busy
// machine, and GATEWAY_REQUEST_TIMEOUT is raised past it (with the
// default 5 s, the first read of each client, which waits out the dead
// holder's lease, answered 503 at the request's deadline).
func TestEndToEndLeaseHolderKilled(t *testing.T) {
	const gateways, clients, listings = 4, 4, 30
	const storeTimeout, redisTimeout, latency = 3 * time.Second, time.Second, 500 * time.Millisecond
	loadTimeout := storeTimeout + 3*redisTimeout
	// The request's deadline past a waiter's longest wait and its own load:
	// with these timeouts the lease outlives the 5 s default, and a waiter
	// on a dead holder answers 503 at the request's deadline.
	requestTimeout := loadTimeout + storeTimeout + 2*time.Second
	f := newColdFleet(t, gateways, listings, environment{"GATEWAY_STORE_TIMEOUT": storeTimeout.String(), "GATEWAY_REDIS_TIMEOUT": redisTimeout.String(),
		"GATEWAY_REQUEST_TIMEOUT": requestTimeout.String(), "GATEWAY_WRITE_TIMEOUT": (2 * requestTimeout).String()})
	victim, survivors := f.ps[0], f.ps[1:]
	f.pg.SetLatency(latency)
	for i := range listings { // every load at once; their answers end with gateway 0
		go (&burstOutcome{}).read(victim, f.tok, burstFirstID+i)
	}
	leased := func() int {
		n := 0
		for i := range listings {
			name := fmt.Sprintf("%srealty:id:%d", f.prefix, burstFirstID+i)
			if f.rdb.Exists(context.Background(), "{"+name+"}:lease").Val() == 1 {
				n++
			}
		}
		return n
	}
	eventually(t, "gateway 0 holds leases", func() bool { return leased() >= listings/2 })
	done := make(chan *burstOutcome)
	go func() { done <- f.burst(survivors, clients, listings) }()
	time.Sleep(100 * time.Millisecond) // the survivors' first reads find the leases
	held := leased()
	if err := victim.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	o := <-done
	t.Logf("gateway 0 killed holding %d of %d leases; the survivors answered %d reads, the last %v after the kill, the slowest in %v",
		held, listings, o.requests.Load(), time.Since(killed).Round(time.Millisecond), time.Duration(o.slowest.Load()).Round(time.Millisecond))
	o.requireAllRight(t)
	if held == 0 {
		t.Fatal("gateway 0 held no lease when it was killed: the test did not exercise a dead holder")
	}
	if bound := 2*loadTimeout + testenv.Patience(); time.Duration(o.slowest.Load()) > bound {
		t.Fatalf("a read on a survivor took %v; want at most %v", time.Duration(o.slowest.Load()), bound)
	}
}
