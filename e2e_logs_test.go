package main

import (
	"context"
	"encoding/json"
	"net/http"
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
