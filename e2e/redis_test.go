package e2e

// End-to-end tests of the gateway on Redis beyond one node: a real local
// three-node Redis Cluster and a master, replica and sentinel, each started
// by the test on free ports.

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/testenv"
)

// TestEndToEndRedisCluster runs two gateways and the admin commands on a
// three-node cluster: a miss writes both keys of a listing, which hash to
// different slots; an update on one gateway is read back in both forms on
// the other; the login limiter counts one account's failures across both.
func TestEndToEndRedisCluster(t *testing.T) {
	addrs := testenv.RedisCluster(t, 3)
	const prefix = "e2e:"
	e := environment{
		"GATEWAY_DATA_DIR":               t.TempDir(),
		"GATEWAY_STORE_URL":              testenv.PostgresURL(t),
		"GATEWAY_REDIS_MODE":             "cluster",
		"GATEWAY_REDIS_URL":              fmt.Sprintf("redis://%s?addr=%s&addr=%s", addrs[0], addrs[1], addrs[2]),
		"GATEWAY_REDIS_PREFIX":           prefix,
		"GATEWAY_JWT_SECRET":             e2eSecret,
		"GATEWAY_LOGIN_ACCOUNT_FAILURES": "4",
	}
	w := newWorld(t, e)
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer rdb.Close()

	keys := listingKeys(prefix, 1001, w.firm, 7)
	for _, k := range keys {
		if n, err := rdb.Del(ctx, k).Result(); err != nil || n != 1 {
			t.Fatalf("import did not write %s to the cluster: %d, %v", k, n, err)
		}
	}
	if a, b := rdb.ClusterKeySlot(ctx, keys[0]).Val(), rdb.ClusterKeySlot(ctx, keys[1]).Val(); a == b {
		t.Fatalf("both keys hash to slot %d; the test needs them apart", a)
	}

	p1, p2 := start(t, maps.Clone(e)), start(t, maps.Clone(e))
	tok := p1.token(t, w.passwordLogin())
	if r := p1.view(t, "/realty/1001", tok); r.status != http.StatusOK || r.header.Get("X-Cache") != "MISS" {
		t.Fatalf("first view: %d X-Cache=%q %s", r.status, r.header.Get("X-Cache"), r.body)
	}
	for _, k := range keys {
		if n := rdb.Exists(ctx, k).Val(); n != 1 {
			t.Errorf("after a miss, %s is not in the cluster", k)
		}
	}
	// The view asked for gzip (net/http does): the variant made is added
	// to both records, each in its own slot (the ninth field; a record may
	// end with its Last-Modified, m<ms>, after it).
	for _, k := range keys {
		testenv.WaitFor(t, func() bool {
			v, err := rdb.Get(ctx, k).Result()
			head, _, _ := strings.Cut(v, "\n")
			fields := strings.Fields(head)
			if n := len(fields); n > 0 && strings.HasPrefix(fields[n-1], "m") {
				fields = fields[:n-1]
			}
			return err == nil && len(fields) == 9
		})
	}

	paths := []string{"/realty/1001", fmt.Sprintf("/realty/%d-7", w.firm)}
	for _, path := range paths { // p2 holds the old version in its local tier
		if got := titleOf(t, p2.view(t, path, tok)); got != "Sea view" {
			t.Fatalf("p2 %s: title %q", path, got)
		}
	}
	put(t, p1, "/realty/1001", tok, 2)
	for _, p := range []*process{p2, p1} {
		for _, path := range paths {
			if got := titleOf(t, p.view(t, path, tok)); got != "v2" {
				t.Errorf("%s %s after the update: title %q, want v2", p.Base, path, got)
			}
		}
	}

	wrong := strings.Replace(w.passwordLogin(), w.password, "wrong-password", 1)
	var statuses []int
	for i := range 6 {
		statuses = append(statuses, []*process{p1, p2}[i%2].login(t, wrong).status)
	}
	if want := []int{401, 401, 401, 401, 429, 429}; fmt.Sprint(statuses) != fmt.Sprint(want) {
		t.Errorf("failed logins alternating over two gateways: %v, want %v", statuses, want)
	}
	var rateKeys atomic.Int64 // ForEachMaster runs on every master at once
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		n, err := node.Keys(ctx, "rate:"+prefix+"*").Result()
		rateKeys.Add(int64(len(n)))
		return err
	})
	if err != nil || rateKeys.Load() == 0 {
		t.Errorf("no limiter keys in the cluster (%d, %v)", rateKeys.Load(), err)
	}
}

// TestEndToEndRedisSentinel runs a gateway on a sentinel-managed master
// and replica, fails the master over with SENTINEL FAILOVER, and checks
// that reads and writes go on, the writes on the new master.
func TestEndToEndRedisSentinel(t *testing.T) {
	s := testenv.RedisSentinel(t)
	const prefix = "e2e:"
	e := environment{
		"GATEWAY_DATA_DIR":     t.TempDir(),
		"GATEWAY_STORE_URL":    testenv.PostgresURL(t),
		"GATEWAY_REDIS_MODE":   "sentinel",
		"GATEWAY_REDIS_URL":    fmt.Sprintf("redis://%s?master_name=%s", s.Addr, s.MasterName),
		"GATEWAY_REDIS_PREFIX": prefix,
		"GATEWAY_JWT_SECRET":   e2eSecret,
	}
	w := newWorld(t, e)
	ctx := context.Background()
	master := redis.NewClient(&redis.Options{Addr: s.Master})
	defer master.Close()
	keys := listingKeys(prefix, 1001, w.firm, 7)
	if n := master.Exists(ctx, keys...).Val(); n != 2 {
		t.Fatalf("the import wrote %d of the two keys to the master", n)
	}

	p := start(t, e)
	tok := p.token(t, w.passwordLogin())
	paths := []string{"/realty/1001", fmt.Sprintf("/realty/%d-7", w.firm)}
	put(t, p, paths[0], tok, 2)

	s.Failover(t)
	promoted := redis.NewClient(&redis.Options{Addr: s.Replica})
	defer promoted.Close()

	// Writes may fail, or miss the cache, while the client finds the new
	// master; then they must go on, and land there.
	var version int
	deadline := time.Now().Add(testenv.Patience())
	for version = 3; ; version++ {
		r := p.request(t, http.MethodPut, paths[1], map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json"},
			fmt.Sprintf(`{"title":"v%d","categoryId":2,"location":{"cityId":34}}`, version))
		if r.status == http.StatusOK && onMaster(ctx, promoted, keys, fmt.Sprintf(`"title":"v%d"`, version)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write reached the new master within %v of the failover: %d %s", testenv.Patience(), r.status, r.body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, path := range paths {
		if got, want := titleOf(t, p.view(t, path, tok)), fmt.Sprintf("v%d", version); got != want {
			t.Errorf("%s after the failover: title %q, want %s", path, got, want)
		}
	}
	tok2 := p.token(t, w.otpLogin()) // the limiter writes there too
	if r := p.view(t, paths[0], tok2); r.status != http.StatusOK {
		t.Errorf("view after the failover: %d %s", r.status, r.body)
	}
}

// onMaster reports whether every key holds a record containing want.
func onMaster(ctx context.Context, rdb *redis.Client, keys []string, want string) bool {
	for _, k := range keys {
		b, err := rdb.Get(ctx, k).Bytes()
		if err != nil || !strings.Contains(string(b), want) {
			return false
		}
	}
	return true
}
