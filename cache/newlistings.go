package cache

import (
	"encoding/binary"
	"iter"
)

// newListings keeps the keys and revisions of an import's new listings
// for the step after its commit, each as varint deltas from the one
// before: an import assigns ids and numbers in runs, so a listing takes
// about 4 bytes rather than an Invalidation's 32, and a file of millions
// keeps the command's memory flat. Not safe for concurrent use.
type newListings struct {
	buf  []byte
	last Invalidation
}

func (s *newListings) add(it Invalidation) {
	for _, d := range [...]int64{it.ID - s.last.ID, it.FirmID - s.last.FirmID, it.No - s.last.No, it.Revision - s.last.Revision} {
		s.buf = binary.AppendVarint(s.buf, d) // int64 wraps, so any values come back
	}
	s.last = it
}

// chunks yields the listings in the order added, size at a time; the
// slice is reused between chunks.
func (s *newListings) chunks(size int) iter.Seq[[]Invalidation] {
	return func(yield func([]Invalidation) bool) {
		chunk := make([]Invalidation, 0, size)
		var it Invalidation
		for b := s.buf; len(b) > 0; {
			for _, field := range [...]*int64{&it.ID, &it.FirmID, &it.No, &it.Revision} {
				d, n := binary.Varint(b)
				*field += d
				b = b[n:]
			}
			if chunk = append(chunk, it); len(chunk) == size {
				if !yield(chunk) {
					return
				}
				chunk = chunk[:0]
			}
		}
		if len(chunk) > 0 {
			yield(chunk)
		}
	}
}
