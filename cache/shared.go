package cache

import (
	"context"
	"time"

	"github.com/realty-gateway/gateway/breaker"
)

// sharedTier is the stage a read reaches past the local tier and its
// flight: Redis, which every gateway shares (redis.go), or without Redis
// the process's memory (memory.go). Writes, the change feed's Apply and
// imports write to it; every write is guarded by the record's revision,
// so that an older version never replaces a newer one.
type sharedTier interface {
	// get returns the value under name; nil, nil where there is none.
	get(ctx context.Context, name string) ([]byte, error)
	// fill writes r under each name, in one round trip where it can, and
	// returns one error per name.
	fill(ctx context.Context, names []string, r record, ttl time.Duration) []error
	// write runs key writes, in one round trip of their own where it can,
	// and returns one error per write.
	write(ctx context.Context, writes []keyWrite) []error
	// del removes a key.
	del(ctx context.Context, name string) error
	// lease takes the fleet's lease on the cold key name for ttl under
	// token, and reports whether this process holds it; without Redis
	// every process holds its own. release ends it where it is still
	// token's and announces name's fill to the gateways that wait; best
	// effort, without waiting (lease.go).
	lease(ctx context.Context, name, token string, ttl time.Duration) (bool, error)
	release(name, token string)
	// addVariants adds r's variants to the records under names that still
	// hold r's version; best effort, without waiting.
	addVariants(names []string, r record)
	// identity names the Redis behind the tier; empty reports whether it
	// holds no key at all. Both fail with errNoRedis without Redis.
	identity(ctx context.Context) (string, error)
	empty(ctx context.Context) (bool, error)
	// breakerState is the state of the tier's breaker.
	breakerState() breaker.State
}

// keyWrite is one key's part of a write or of applying a change.
type keyWrite struct {
	name  string
	value record // written unless the key holds a newer revision
	ttl   time.Duration
	// ifCached: value goes only over a cached older copy; an empty key
	// gets floor instead, and one that holds this revision or newer is
	// left alone.
	ifCached bool
	floor    record
}
