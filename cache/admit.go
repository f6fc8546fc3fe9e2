package cache

import "time"

// verdict is admission's answer: whether a copy may answer a read, and if
// not, why.
type verdict uint8

const (
	admitted  verdict = iota // a fresh listing: serve it
	absent                   // a fresh "no such listing": answer 404
	expired                  // past its freshness
	untrusted                // a Redis copy while Redis may have missed a write (trust.go)
	floored                  // a floor's: a Redis floor record, or a copy below a floor (floors.go)
	foreign                  // another listing's copy, or a value written under the wrong key
	missing                  // nothing readable was found
)

// fallback reports whether a copy of this verdict may answer while the
// store fails (stale-if-error): one that is only old or only untrusted,
// never one a floor refuses, which is older than a write known here.
// The caller checks that it is a listing, not an absence.
func (v verdict) fallback() bool { return v == expired || v == untrusted }

// origin is the tier a copy was read from.
type origin uint8

const (
	fromLocal  origin = iota // this process's memory, kept coherent by this process
	fromShared               // Redis, which other gateways write and which may miss writes
)

// admit says whether copy r, found under k in the tier from, may answer a
// read at now (unix ms); a nil r is nothing readable found. Its answers
// are every verdict. Every read asks it: lookLocal and the flight's look
// at the shared tier.
// The checks run cheapest and most common first: a hit costs a few
// compares and, for a Redis copy, two atomic loads where no floor stands.
// A local copy is not checked against the floors: invalidate dropped
// what a floor's raise outdated, and keep refuses what is below one.
func (c *Cache) admit(k Key, r *record, now int64, from origin) verdict {
	switch {
	case r == nil:
		return missing
	case r.kind == kindFloor:
		return floored
	case !r.belongsTo(k):
		return foreign
	case from == fromShared && c.floors.refuses(k, r, time.UnixMilli(now)):
		return floored
	case from == fromShared && !c.trust.allows():
		return untrusted
	case now >= r.freshUntil:
		return expired
	case r.kind == kindAbsent:
		return absent
	}
	return admitted
}
