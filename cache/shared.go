package cache

import (
	"context"
	"time"
)

// sharedTier is the stage a read reaches past the local tier and its
// flight: Redis, which every gateway shares (redis.go), or without Redis
// the process's memory (memory.go). Writes, the change feed's Apply and
// imports write to it; every write is guarded by the record's revision,
// so that an older version never replaces a newer one.
type sharedTier interface {
	// get returns the value under name; nil where there is none. Where the
	// lease l is wanted, the look takes it on the empty key or finds it
	// held elsewhere, and l records which (lease.go).
	get(ctx context.Context, name string, l *lease) ([]byte, error)
	// fill writes r under each name, in one round trip where it can, and
	// returns one error per name; the fill of l's key ends the lease l.
	fill(ctx context.Context, names []string, r record, ttl time.Duration, l *lease) []error
	// write runs key writes, in one round trip of their own where it can,
	// and returns one error per write.
	write(ctx context.Context, writes []keyWrite) []error
	// del removes a key.
	del(ctx context.Context, name string) error
}

// keyWrite is one key's part of a write or of applying a change.
type keyWrite struct {
	key   Key
	name  string // key's, with the prefix
	value record // written unless the key holds a newer revision
	ttl   time.Duration
	// ifCached: value goes only over a cached older copy; an empty key
	// gets floor instead, and one that holds this revision or newer is
	// left alone.
	ifCached bool
	floor    record
}
