package cache

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/testenv"
)

// TestClusterAnnouncementCountsEveryGateway: in a Redis Cluster a PUBLISH
// counts only the subscribers of the node that ran it. An announcement
// must still learn that both gateways received it, every time, or a write
// would not wait for the other gateway's acknowledgement.
func TestClusterAnnouncementCountsEveryGateway(t *testing.T) {
	addrs := testenv.RedisCluster(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var invs []*invalidator
	for range 2 {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		defer rdb.Close()
		c := must(t)(NewRedis(rdb, time.Second, testConfig(), testDeps(newSource(), "t:")))
		go c.Run(ctx)
		<-c.Subscribed()
		invs = append(invs, c.inv)
	}
	for i := range 20 {
		n, err := invs[i%2].publishEvent(ctx, encodeAnnouncement("x-1", invs[i%2].acks, []Invalidation{{ID: 1, FirmID: 1, No: 1, Revision: 1}}))
		if err != nil || n != 2 {
			t.Fatalf("publish %d: %d receivers, %v; want 2", i, n, err)
		}
	}
}
