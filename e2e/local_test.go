package e2e

// End-to-end tests of the local tier in front of Redis: several gateway
// processes share Redis and PostgreSQL; every write must be invisible on
// no replica once it has returned, whatever each replica held locally.

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/faultproxy"
	"github.com/realty-gateway/gateway/internal/testenv"
)

// replicas starts n gateways on one Redis and database, waits until each
// has its local tier on, and returns them with a writer's and a reader's
// token and the two paths of listing 1001.
func replicas(t *testing.T, n int) (ps []*process, w world, writeTok, readTok string, paths []string) {
	t.Helper()
	e, _ := postgresEnv(t, testenv.PostgresURL(t), testenv.RedisAddr(t))
	w = newWorld(t, e)
	for range n {
		ps = append(ps, start(t, maps.Clone(e)))
	}
	for _, p := range ps {
		testenv.WaitFor(t, func() bool {
			s, err := p.ReadStats()
			return err == nil && s.Cache.LocalTierOn
		})
	}
	return ps, w, ps[0].token(t, w.passwordLogin()), ps[0].token(t, w.otpLogin()),
		[]string{"/realty/1001", fmt.Sprintf("/realty/%d-7", w.firm)}
}

// TestEndToEndLocalTierWriteThenRead: the reader holds the current version
// of both forms in its local tier; a write on the other replica returns;
// the reader's very next read of either form is the new version. 200 times.
func TestEndToEndLocalTierWriteThenRead(t *testing.T) {
	ps, _, writeTok, readTok, paths := replicas(t, 2)
	writer, reader := ps[0], ps[1]
	before, err := reader.ReadStats()
	if err != nil {
		t.Fatal(err)
	}
	for v := 1; v <= 200; v++ {
		for _, path := range paths { // twice: the second read is local
			reader.view(t, path, readTok)
			reader.view(t, path, readTok)
		}
		put(t, writer, paths[v%2], writeTok, v)
		for _, path := range paths {
			if got, want := titleOf(t, reader.view(t, path, readTok)), fmt.Sprintf("v%d", v); got != want {
				t.Fatalf("read %s right after the write of %s returned %q", path, want, got)
			}
		}
	}
	after, err := reader.ReadStats()
	if err != nil {
		t.Fatal(err)
	}
	if local := after.Cache.LocalHits - before.Cache.LocalHits; local < 200 {
		t.Fatalf("only %d reads were answered by the reader's local tier: the test did not exercise it", local)
	}
	if after.Cache.Unacknowledged > 0 {
		t.Logf("NOTE: %d invalidations were not acknowledged within the wait", after.Cache.Unacknowledged)
	}
}

// TestEndToEndLocalTierSubscriptionLoss kills every pub/sub connection; a
// replica that lost its subscription must empty its tier at once, so a
// write after it noticed (its log says so) is seen by its next read, and
// the tier comes back.
func TestEndToEndLocalTierSubscriptionLoss(t *testing.T) {
	ps, _, writeTok, readTok, paths := replicas(t, 2)
	writer, reader := ps[0], ps[1]
	for _, path := range paths {
		reader.view(t, path, readTok)
		reader.view(t, path, readTok)
	}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer rdb.Close()
	if err := rdb.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	noticed := eventually(t, "the reader notices the lost subscription", func() bool {
		return strings.Contains(reader.Logs(), "invalidation subscription lost")
	})
	t.Logf("the reader noticed the lost subscription %v after the kill", noticed)
	put(t, writer, paths[0], writeTok, 1)
	for _, path := range paths {
		if got := titleOf(t, reader.view(t, path, readTok)); got != "v1" {
			t.Fatalf("read %s after the subscription was lost and a write returned: %q, want v1", path, got)
		}
	}
	if !strings.Contains(reader.Logs(), "invalidation subscription lost") {
		t.Fatalf("the reader did not notice the lost subscription:\n%s", reader.Logs())
	}
	testenv.WaitFor(t, func() bool { // the tier comes back on its own
		s, err := reader.ReadStats()
		return err == nil && s.Cache.LocalTierOn
	})
	put(t, writer, paths[1], writeTok, 2)
	if got := titleOf(t, reader.view(t, paths[0], readTok)); got != "v2" {
		t.Fatalf("after resubscribing: %q, want v2", got)
	}
}

// TestEndToEndInvalidationLatency measures what waiting for the other
// replicas' acknowledgements adds to a write, with 1, 2 and 4 replicas,
// and checks every replica's next read after each write.
func TestEndToEndInvalidationLatency(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("%d replicas", n), func(t *testing.T) {
			ps, _, writeTok, readTok, paths := replicas(t, n)
			var took []time.Duration
			for v := 1; v <= 60; v++ {
				for _, p := range ps {
					p.view(t, paths[0], readTok)
					p.view(t, paths[0], readTok)
				}
				took = append(took, put(t, ps[0], paths[0], writeTok, v))
				for i, p := range ps {
					if got, want := titleOf(t, p.view(t, paths[0], readTok)), fmt.Sprintf("v%d", v); got != want {
						t.Fatalf("replica %d read %q right after the write of %s", i, got, want)
					}
				}
			}
			slices.Sort(took)
			t.Logf("PUT latency with %d replicas: p50 %v, p99 %v (60 writes)", n,
				took[len(took)/2].Round(10*time.Microsecond), took[len(took)*99/100].Round(10*time.Microsecond))
		})
	}
}

// TestEndToEndLocalTierRedisUnreachable cuts one replica off Redis: it
// must empty its local tier, so its reads go to the store and show a write
// made meanwhile on the other replica; the tier comes back with Redis.
func TestEndToEndLocalTierRedisUnreachable(t *testing.T) {
	e, _ := postgresEnv(t, testenv.PostgresURL(t), testenv.RedisAddr(t))
	w := newWorld(t, e)
	proxy := faultproxy.New(t, testenv.RedisAddr(t))
	cut := maps.Clone(e)
	cut["GATEWAY_REDIS_URL"] = "redis://" + proxy.Addr() + "/0"
	writer, reader := start(t, maps.Clone(e)), start(t, cut)
	tierOn := func(p *process, want bool) func() bool {
		return func() bool {
			s, err := p.ReadStats()
			gauge, _ := p.metric(t, "gateway_cache_local_tier_on")
			return err == nil && s.Cache.LocalTierOn == want && (gauge == 1) == want
		}
	}
	testenv.WaitFor(t, tierOn(reader, true))
	writeTok, readTok := writer.token(t, w.passwordLogin()), writer.token(t, w.otpLogin())
	path := "/realty/1001"
	reader.view(t, path, readTok)
	s0, err := reader.ReadStats()
	if err != nil {
		t.Fatal(err)
	}
	reader.view(t, path, readTok)
	if s1, err := reader.ReadStats(); err != nil || s1.Cache.LocalHits == s0.Cache.LocalHits {
		t.Fatalf("the reader's second read was not a local hit (%v)", err)
	}

	errorsBefore, _ := reader.metric(t, "gateway_cache_redis_errors_total")
	proxy.Stop()
	testenv.WaitFor(t, tierOn(reader, false))
	put(t, writer, path, writeTok, 1)
	if got := titleOf(t, reader.view(t, path, readTok)); got != "v1" {
		t.Fatalf("read on the replica cut off Redis after a write returned: %q, want v1", got)
	}
	if errorsAfter, _ := reader.metric(t, "gateway_cache_redis_errors_total"); errorsAfter <= errorsBefore {
		t.Errorf("gateway_cache_redis_errors_total %v after a read without Redis, was %v", errorsAfter, errorsBefore)
	}
	if err := proxy.Restart(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, tierOn(reader, true))
	// Back on, the tier must not serve what it held before the cut: the
	// write's invalidation never reached it.
	if got := titleOf(t, reader.view(t, path, readTok)); got != "v1" {
		t.Fatalf("read after the tier came back: %q, want v1", got)
	}
}

// TestEndToEndCDNPurgeCommand: the operator's purge of a firm's tag and of
// one listing (by number), sent once and acknowledged.
func TestEndToEndCDNPurgeCommand(t *testing.T) {
	var mu sync.Mutex
	var got []string
	fake := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Purge-Token"))
		mu.Unlock()
	}))
	defer fake.Close()
	e, _ := postgresEnv(t, testenv.PostgresURL(t), testenv.RedisAddr(t))
	w := newWorld(t, e)
	e["GATEWAY_CDN_PURGE_URL"] = fake.URL + "/purge/{key}"
	e["GATEWAY_CDN_PURGE_HEADER"] = "Purge-Token: tok"
	if out := admin(t, e, "", "cdn", "purge", "--firm", fmt.Sprint(w.firm)); out["purged"] != fmt.Sprintf("firm-%d", w.firm) {
		t.Fatalf("firm purge printed %v", out)
	}
	if out := admin(t, e, "", "cdn", "purge", "--listing", fmt.Sprintf("%d-7", w.firm)); out["purged"] != "realty-1001" {
		t.Fatalf("listing purge printed %v", out)
	}
	want := []string{fmt.Sprintf("POST /purge/firm-%d tok", w.firm), "POST /purge/realty-1001 tok"}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("the CDN received %q, want %q", got, want)
	}
}

// TestEndToEndCachePurgeCommand: two replicas hold listing 1001 in their
// local tiers and Redis; "cache purge FIRM-NO" removes both Redis keys,
// and each replica's next read of either form is a miss. Its usage errors
// exit 2, a Redis that does not answer exits 1.
func TestEndToEndCachePurgeCommand(t *testing.T) {
	ps, w, _, tok, paths := replicas(t, 2)
	for _, p := range ps {
		for _, path := range paths {
			p.view(t, path, tok)
			if r := p.view(t, path, tok); r.header.Get("X-Cache") != "HIT" {
				t.Fatalf("%s %s before the purge: X-Cache %q", p.Base, path, r.header.Get("X-Cache"))
			}
		}
	}
	prefix := w.env["GATEWAY_REDIS_PREFIX"]
	keys := []any{prefix + "realty:id:1001", fmt.Sprintf("%srealty:listing:%d-7", prefix, w.firm)}
	out := admin(t, w.env, "", "cache", "purge", fmt.Sprintf("%d-7", w.firm))
	if fmt.Sprint(out["purged"]) != fmt.Sprint(keys) {
		t.Fatalf("cache purge printed %v, want the keys %v", out, keys)
	}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer rdb.Close()
	if n := rdb.Exists(context.Background(), prefix+"realty:id:1001", fmt.Sprintf("%srealty:listing:%d-7", prefix, w.firm)).Val(); n != 0 {
		t.Fatalf("%d of the listing's keys are left in Redis", n)
	}
	// No replica answers the first read of either form from its local
	// tier: the purge reached them all.
	for _, p := range ps {
		for _, path := range paths {
			before := p.Stats(t).Cache.LocalHits
			if r := p.view(t, path, tok); r.status != http.StatusOK {
				t.Fatalf("%s %s after the purge: %d", p.Base, path, r.status)
			}
			if after := p.Stats(t).Cache.LocalHits; after != before {
				t.Errorf("%s %s after the purge: served from the local tier", p.Base, path)
			}
		}
	}
	noRedis := maps.Clone(w.env)
	noRedis["GATEWAY_REDIS_URL"] = "redis://127.0.0.1:1/0"
	tests := []struct {
		name string
		env  environment
		give []string
		want int
	}{
		{name: "no listing", env: w.env, give: []string{"cache", "purge"}, want: 2},
		{name: "two listings", env: w.env, give: []string{"cache", "purge", "1001", "1002"}, want: 2},
		{name: "not a listing", env: w.env, give: []string{"cache", "purge", "abc"}, want: 2},
		{name: "zero", env: w.env, give: []string{"cache", "purge", "0"}, want: 2},
		{name: "help", env: w.env, give: []string{"cache", "purge", "-h"}, want: 0},
		{name: "redis down", env: noRedis, give: []string{"cache", "purge", "1001"}, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if code, _ := gatewayCmd(t, tt.env, "", tt.give...); code != tt.want {
				t.Errorf("exit %d, want %d", code, tt.want)
			}
		})
	}
}

// TestEndToEndMetrics reads /metrics after traffic: the request, cache,
// login, store and breaker series are there, with bounded labels.
func TestEndToEndMetrics(t *testing.T) {
	ps, w, writeTok, readTok, paths := replicas(t, 1)
	p := ps[0]
	put(t, p, paths[0], writeTok, 1)
	for range 3 {
		for _, path := range paths {
			p.view(t, path, readTok)
		}
	}
	p.view(t, "/realty/424242", readTok)
	p.login(t, fmt.Sprintf(`{"email":"nobody@acme.example","key":%q}`, w.key))
	p.request(t, "BREW", "/realty/1001", nil, "") // a method nobody serves
	text := p.metrics(t)
	for _, want := range []string{
		`gateway_http_requests_total{code="200",method="GET",route="/realty/:ref"}`,
		`gateway_http_requests_total{code="404",method="GET",route="/realty/:ref"} 1`,
		`gateway_http_requests_total{code="401",method="POST",route="/auth/login"} 1`,
		`gateway_http_request_duration_seconds_bucket{method="GET",route="/realty/:ref",le=`,
		`gateway_cache_requests_total{result="hit",tier="local"}`,
		`gateway_cache_requests_total{result="miss",tier="redis"}`,
		`gateway_logins_total{outcome="ok"}`,
		`gateway_logins_total{outcome="bad_credentials"} 1`,
		`gateway_store_requests_total{op="listing_by_id",outcome="not_found"} 1`,
		`gateway_store_request_duration_seconds_bucket{op="firm_by_key",outcome="ok",le=`,
		`gateway_breaker_state{breaker="store"} 0`,
		`gateway_breaker_state{breaker="redis"} 0`,
		`gateway_breaker_state{breaker="limiter"} 0`,
		`gateway_singleflight_shared_total`,
		`gateway_redis_pool_total_conns{pool="redis"}`,
		`gateway_ready 1`,
		`gateway_cache_local_tier_on 1`,
		`gateway_cache_local_budget_bytes 6.7108864e+07`, // the default 64 MiB
		`gateway_cache_redis_errors_total`,
		`gateway_cache_announcements_total`,
		`gateway_cache_announcements_unacknowledged_total`,
		`go_goroutines`,
		`process_resident_memory_bytes`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if n, _ := p.metric(t, "gateway_cache_announcements_total"); n < 1 { // the write's, and the feed's if it applied one
		t.Errorf("gateway_cache_announcements_total %v after a write, want 1 or more", n)
	}
	for _, raw := range []string{"/realty/1001", "/realty/424242", "acme.example", w.key, "BREW"} {
		if strings.Contains(text, raw) {
			t.Errorf("/metrics holds %q: labels must stay bounded and anonymous", raw)
		}
	}
	for _, probe := range []string{"/livez", "/healthz", "/readyz"} {
		if code := p.adminStatus(t, probe); code != http.StatusNoContent {
			t.Errorf("%s: %d", probe, code)
		}
	}
}
