// Package revocation owns token revocation inside a gateway: the Set of
// revocations in force that the token check consults on every request,
// the Keeper that fills it from the store and from Redis, and the
// announcement on Redis with which a writer of a revocation (the CLI)
// tells every gateway at once.
//
// A revocation says that the tokens a firm's user, or any user of the
// firm, was issued at or before a time T are no longer valid. The store
// holds them (upstream.Store.RevokeTokens); a gateway learns of one within
// milliseconds through the announcement while Redis is up, and within
// Config.Poll from the store in any case. A revocation older than the
// longest token lifetime plus the leeway names only expired tokens: it is
// dropped from the Set and pruned from the store.
//
// Concurrency: Set.Revoked takes no lock: it reads an immutable snapshot
// through an atomic pointer. Writers (Add, Prune) copy the snapshot, change
// the copy and swap it in, one at a time under a mutex. A *Keeper is safe
// for concurrent use; Run is called once.
package revocation

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

// Set is the revocations in force, keyed by firm and by (firm, user).
type Set struct {
	mu   sync.Mutex // serializes writers
	snap atomic.Pointer[snapshot]
}

// snapshot is never changed once published.
type snapshot struct {
	firms map[int64]*firm
	n     int    // revocations held
	gen   uint64 // grows with every published change
}

// firm holds one firm's revocations as milliseconds since 1970: all for
// every user of the firm (none: math.MinInt64), users by user id.
type firm struct {
	all   int64
	users map[int64]int64
}

// none is the time of a revocation that does not exist: no token's issue
// time is at or before it.
const none = math.MinInt64

// NewSet returns an empty Set.
func NewSet() *Set {
	s := &Set{}
	s.snap.Store(&snapshot{firms: map[int64]*firm{}, gen: 1})
	return s
}

// Generation names the revocations in force: it grows with every change,
// so a caller may remember that a token was not revoked at a generation
// and skip the lookup while the generation stays.
func (s *Set) Generation() uint64 { return s.snap.Load().gen }

// Revoked reports whether a token of firmID's user userID issued at
// issuedMs (milliseconds since 1970) is revoked: issued at or before the
// firm's revocation or the user's.
func (s *Set) Revoked(firmID, userID, issuedMs int64) bool {
	f := s.snap.Load().firms[firmID]
	if f == nil {
		return false
	}
	if issuedMs <= f.all {
		return true
	}
	t, ok := f.users[userID]
	return ok && issuedMs <= t
}

// Len is how many revocations the Set holds.
func (s *Set) Len() int { return s.snap.Load().n }

// Add puts rs in force. Of two revocations of one scope, the later time
// stays. It reports whether any changed the Set.
func (s *Set) Add(rs ...upstream.Revocation) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.snap.Load()
	next := &snapshot{firms: make(map[int64]*firm, len(old.firms)+1), n: old.n, gen: old.gen + 1}
	for id, f := range old.firms {
		next.firms[id] = f
	}
	copied := map[int64]bool{} // firms copied for this change
	changed := false
	for _, r := range rs {
		at := r.At.UnixMilli()
		f := next.firms[r.FirmID]
		current := int64(none)
		if f != nil {
			current = f.all
			if r.UserID != 0 {
				var ok bool
				if current, ok = f.users[r.UserID]; !ok {
					current = none
				}
			}
		}
		if at <= current {
			continue
		}
		if !copied[r.FirmID] {
			f = f.clone()
			next.firms[r.FirmID] = f
			copied[r.FirmID] = true
		}
		if current == none {
			next.n++
		}
		if r.UserID == 0 {
			f.all = at
		} else {
			f.users[r.UserID] = at
		}
		changed = true
	}
	if changed {
		s.snap.Store(next)
	}
	return changed
}

// Prune drops the revocations older than before: every token they name
// has expired.
func (s *Set) Prune(before time.Time) {
	cut := before.UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.snap.Load()
	next := &snapshot{firms: make(map[int64]*firm, len(old.firms)), gen: old.gen + 1}
	changed := false
	for id, f := range old.firms {
		kept := &firm{all: f.all, users: make(map[int64]int64, len(f.users))}
		if kept.all != none && kept.all < cut {
			kept.all, changed = none, true
		}
		for u, t := range f.users {
			if t < cut {
				changed = true
				continue
			}
			kept.users[u] = t
		}
		if kept.all == none && len(kept.users) == 0 {
			continue
		}
		next.firms[id] = kept
		next.n += len(kept.users)
		if kept.all != none {
			next.n++
		}
	}
	if changed {
		s.snap.Store(next)
	}
}

// clone copies f, or makes an empty firm when f is nil.
func (f *firm) clone() *firm {
	if f == nil {
		return &firm{all: none, users: map[int64]int64{}}
	}
	c := &firm{all: f.all, users: make(map[int64]int64, len(f.users)+1)}
	for u, t := range f.users {
		c.users[u] = t
	}
	return c
}
