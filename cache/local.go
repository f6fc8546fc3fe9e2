package cache

import "time"

// localTier is a read's first stage: copies kept in this process, looked
// up without I/O. It is the front tier in front of Redis (front.go), none
// where that is turned off (noLocal), or without Redis the process's own
// memory, which is then its shared tier too (memory.go).
type localTier interface {
	// lookup returns the copy kept under k, for admission to judge; the
	// caller must not modify it.
	lookup(k Key, now time.Time) (*record, bool)
	// generation is taken before a read whose result keep may take.
	generation() uint64
	// keep takes r, read or written for k by a read or write that began
	// at began, unless the tier changed generation since gen or r is older
	// than what it must keep out.
	keep(k Key, r record, gen uint64, began time.Time)
	// invalidate drops older versions of the listings named, and keeps
	// them out for floorFor.
	invalidate(items []Invalidation, now time.Time, floorFor time.Duration)
	// reweigh charges k's copy again, where it holds the version whose
	// variants v are: a variant was added to it.
	reweigh(k Key, v *variants)
}

// noLocal is the local tier of a gateway with Redis and its local tier
// turned off: it holds nothing.
type noLocal struct{}

func (noLocal) lookup(Key, time.Time) (*record, bool)               { return nil, false }
func (noLocal) generation() uint64                                  { return 0 }
func (noLocal) keep(Key, record, uint64, time.Time)                 {}
func (noLocal) invalidate([]Invalidation, time.Time, time.Duration) {}
func (noLocal) reweigh(Key, *variants)                              {}
