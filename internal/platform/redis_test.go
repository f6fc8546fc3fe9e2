package platform

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/config"
)

func TestOpenRedis(t *testing.T) {
	tests := []struct {
		name     string
		give     config.Redis
		wantType string // "" for no client
		wantErr  string
	}{
		{name: "no url", give: config.Redis{Mode: config.RedisSingle}},
		{name: "single", give: config.Redis{Mode: config.RedisSingle, URL: "redis://127.0.0.1:6379/2"}, wantType: "*redis.Client"},
		{name: "cluster", give: config.Redis{Mode: config.RedisCluster, URL: "redis://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002"}, wantType: "*redis.ClusterClient"},
		{name: "sentinel", give: config.Redis{Mode: config.RedisSentinel, URL: "redis://127.0.0.1:26379?master_name=gw&addr=127.0.0.1:26380"}, wantType: "*redis.Client"},
		{name: "sentinel without master", give: config.Redis{Mode: config.RedisSentinel, URL: "redis://127.0.0.1:26379"}, wantErr: "master_name"},
		{name: "cluster with an unknown option", give: config.Redis{Mode: config.RedisCluster, URL: "redis://127.0.0.1:7000?bogus=1"}, wantErr: "cluster URL"},
		{name: "bad single url", give: config.Redis{Mode: config.RedisSingle, URL: "http://x"}, wantErr: "redis:// URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.give.Timeout = 50 * time.Millisecond
			rdb, err := OpenRedis(tt.give)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "127.0.0.1") {
					t.Errorf("the error repeats the URL: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rdb == nil {
				if tt.wantType != "" {
					t.Fatalf("no client, want %s", tt.wantType)
				}
				return
			}
			defer rdb.Close()
			if got := typeName(rdb); got != tt.wantType {
				t.Errorf("client %s, want %s", got, tt.wantType)
			}
			var read, pool time.Duration
			var retries int
			var ctxTimeout bool
			switch c := rdb.(type) {
			case *redis.Client:
				o := c.Options()
				read, pool, retries, ctxTimeout = o.ReadTimeout, o.PoolTimeout, o.MaxRetries, o.ContextTimeoutEnabled
			case *redis.ClusterClient:
				o := c.Options()
				read, pool, retries, ctxTimeout = o.ReadTimeout, o.PoolTimeout, o.MaxRetries, o.ContextTimeoutEnabled
			}
			if read != tt.give.Timeout || pool != tt.give.Timeout || retries != 1 || !ctxTimeout {
				t.Errorf("read %v, pool wait %v, retries %d, context deadlines %v; want %v, %v, 1, true", read, pool, retries, ctxTimeout, tt.give.Timeout, tt.give.Timeout)
			}
		})
	}
}

func typeName(rdb redis.UniversalClient) string {
	switch rdb.(type) {
	case *redis.ClusterClient:
		return "*redis.ClusterClient"
	case *redis.Client:
		return "*redis.Client"
	}
	return "?"
}
