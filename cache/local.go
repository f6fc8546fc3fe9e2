package cache

import "time"

// localTier is a read's first stage: copies kept in this process, looked
// up without I/O. It is the front tier in front of Redis (front.go), which
// keeps what reads and writes bring (Cache.keepLocal), or without Redis
// the process's own memory, which is then its shared tier too and keeps
// what the shared tier's writes put in it (memory.go). A gateway with
// Redis and its local tier turned off has none: Cache.local is nil.
type localTier interface {
	// lookup returns the copy kept under k, for admission to judge; the
	// caller must not modify it.
	lookup(k Key, now time.Time) (*record, bool)
	// reweigh charges k's copy again, where it holds the version whose
	// variants v are: a variant was added to it.
	reweigh(k Key, v *variants)
}

// generation is the front tier's, taken before a read or write whose
// result keepLocal may take; 0 without a front tier.
func (c *Cache) generation() uint64 {
	if c.front == nil {
		return 0
	}
	return c.front.generation()
}

// keepLocal has the front tier take r for k, read or written by a read or
// write that began at s, unless the tier changed generation since or r is
// older than what it must keep out. Without a front tier there is nothing
// to do: the memory tier holds what the shared tier's write put there.
func (c *Cache) keepLocal(k Key, r record, s since) {
	if c.front != nil {
		c.front.keep(k, r, s.gen, s.at)
	}
}
