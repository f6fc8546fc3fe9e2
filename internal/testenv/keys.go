package testenv

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// DeleteKeys removes the keys that match pattern with SCAN and UNLINK. A
// test's cleanup on a shared Redis must not use KEYS: over a large keyspace
// (a benchmark's leftovers) it blocks the server for seconds, and other
// tests' operations meanwhile run into their timeouts.
func DeleteKeys(ctx context.Context, rdb redis.Cmdable, pattern string) error {
	keys := make([]string, 0, 500)
	unlink := func() error {
		if len(keys) == 0 {
			return nil
		}
		err := rdb.Unlink(ctx, keys...).Err()
		keys = keys[:0]
		return err
	}
	var err error
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		if keys = append(keys, iter.Val()); len(keys) == cap(keys) {
			err = errors.Join(err, unlink())
		}
	}
	return errors.Join(err, iter.Err(), unlink())
}
