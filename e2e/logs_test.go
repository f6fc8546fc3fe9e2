package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/testenv"
)

// TestEndToEndRequestIDOnDeeperLines: a line that the cache writes while
// it serves a request (here, about an unreadable value in Redis) names the
// request, as the access line does.
func TestEndToEndRequestIDOnDeeperLines(t *testing.T) {
	e, prefix := postgresEnv(t, testenv.PostgresURL(t), testenv.RedisAddr(t))
	e["GATEWAY_ACCESS_LOG"] = "all"
	w := newWorld(t, e)
	p := start(t, e)
	tok := p.token(t, w.passwordLogin())
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer rdb.Close()
	if err := rdb.Set(context.Background(), prefix+"realty:id:1001", "not a record", 0).Err(); err != nil {
		t.Fatal(err)
	}
	const id = "deeper-lines-1"
	r := p.request(t, http.MethodGet, "/realty/1001", map[string]string{"Authorization": "Bearer " + tok, "X-Request-ID": id}, "")
	if r.status != http.StatusOK || r.header.Get("X-Cache") != "MISS" {
		t.Fatalf("view over a corrupt value: %d %s %s", r.status, r.header.Get("X-Cache"), r.body)
	}
	lines := func() map[string]map[string]any {
		found := map[string]map[string]any{}
		for line := range strings.Lines(p.Logs()) {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil {
				if msg, _ := rec["msg"].(string); msg == "cache value unreadable, treated as miss" || msg == "request" && rec["requestId"] == id {
					found[msg] = rec
				}
			}
		}
		return found
	}
	testenv.WaitFor(t, func() bool { return len(lines()) == 2 })
	for msg, rec := range lines() {
		if rec["requestId"] != id {
			t.Errorf("line %q names request %v, want %s", msg, rec["requestId"], id)
		}
	}
}

// TestEndToEndMemoryLimit: without GOMEMLIMIT the gateway sets a soft
// memory limit (from the container, else the local tier's budget plus
// headroom); with it, the operator's stands.
func TestEndToEndMemoryLimit(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		want []string // one of these messages
	}{
		{"default", map[string]string{"GATEWAY_LOCAL_CACHE_BYTES": "33554432"}, []string{"memory limit from the container", "memory limit from the local tier's budget"}},
		{"operator's", map[string]string{"GOMEMLIMIT": "300MiB"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := sqliteEnv(t)
			maps.Copy(e, tt.env)
			p := start(t, e)
			var got []map[string]any
			for line := range strings.Lines(p.Logs()) {
				var rec map[string]any
				if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(fmt.Sprint(rec["msg"]), "memory limit") {
					got = append(got, rec)
				}
			}
			if tt.want == nil {
				if len(got) != 0 {
					t.Fatalf("a limit was set over GOMEMLIMIT: %v", got)
				}
				return
			}
			if len(got) != 1 || !slices.Contains(tt.want, got[0]["msg"].(string)) {
				t.Fatalf("memory limit lines %v; want one of %q", got, tt.want)
			}
			if got[0]["msg"] == "memory limit from the local tier's budget" && got[0]["bytes"] != float64(32<<20+48<<20) {
				t.Fatalf("limit %v; want the 32 MiB budget + 48 MiB", got[0]["bytes"])
			}
		})
	}
}
