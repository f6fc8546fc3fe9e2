package upstream

import (
	"bytes"
	"errors"
	"slices"
)

// ErrPreconditionFailed is a conditional write whose precondition was
// false: nothing was written.
var ErrPreconditionFailed = errors.New("precondition failed")

// Precondition is what a conditional write (RFC 9110 §13.1) requires of
// the stored listing. The store evaluates it in the write's own
// transaction, against the row it is about to replace, so that of two
// writers with the same expectation only one writes. The zero value
// requires nothing.
//
// Entity tags are the identity tags that a read of the listing answers
// (ETag); the gateway maps the tags of its compressed variants to them.
type Precondition struct {
	// IfMatch holds when the current tag is one of these (strong
	// comparison: a weak tag never matches), or, with AnyMatch, when
	// there is a current listing at all.
	IfMatch  [][]byte
	AnyMatch bool
	// IfNoneMatch holds when the current tag is none of these (weak
	// comparison), or, with AnyNoneMatch, when there is no current listing.
	IfNoneMatch  [][]byte
	AnyNoneMatch bool
	// IfUnmodifiedSince, in unix seconds, holds when the listing's
	// updatedDate, in whole seconds, is not after it. It is only evaluated
	// without If-Match; 0: absent.
	IfUnmodifiedSince int64
}

// Required reports whether p requires anything.
func (p Precondition) Required() bool {
	return p.AnyMatch || len(p.IfMatch) > 0 || p.AnyNoneMatch || len(p.IfNoneMatch) > 0 || p.IfUnmodifiedSince != 0
}

// Holds evaluates p, in RFC 9110 §13.2.2's order, against an existing
// listing whose identity tag is etag and whose updatedDate is updatedMs.
// A write goes ahead only where it holds.
func (p Precondition) Holds(etag []byte, updatedMs int64) bool {
	switch {
	case p.AnyMatch || len(p.IfMatch) > 0:
		if !p.AnyMatch && !slices.ContainsFunc(p.IfMatch, func(t []byte) bool { return StrongMatch(t, etag) }) {
			return false
		}
	case p.IfUnmodifiedSince != 0:
		if floorDiv(updatedMs, 1000) > p.IfUnmodifiedSince {
			return false
		}
	}
	if p.AnyNoneMatch {
		return false // there is a current listing
	}
	return !slices.ContainsFunc(p.IfNoneMatch, func(t []byte) bool { return WeakMatch(t, etag) })
}

// StrongMatch is RFC 9110's strong comparison: both tags strong and equal.
func StrongMatch(a, b []byte) bool {
	return !isWeak(a) && !isWeak(b) && bytes.Equal(a, b)
}

// WeakMatch is RFC 9110's weak comparison: equal but for W/.
func WeakMatch(a, b []byte) bool {
	return bytes.Equal(bytes.TrimPrefix(a, []byte("W/")), bytes.TrimPrefix(b, []byte("W/")))
}

func isWeak(tag []byte) bool { return bytes.HasPrefix(tag, []byte("W/")) }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
