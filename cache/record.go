package cache

import (
	"bytes"
	"errors"
	"math/bits"
	"strconv"
)

// A record is the value stored under a cache key: a one-line text header
// and then the response body, so a hit needs no JSON encoding.
//
//	v1 <revision> <freshUntilUnixMs> <id> <firmId> <no> <a|p|x> <etag>\n<body>
//
// a is an active listing, p a passive one and x a cached "absent". f is a
// floor: nothing is cached, but a fill older than its revision is refused
// (the guard reads the revision alike), so that a read of an old version
// that was in flight when a change was applied cannot land after it. The
// revision comes first so that the Lua guard can read it with one match.
const recordVersion = "v1"

type kind byte

const (
	kindActive  kind = 'a'
	kindPassive kind = 'p'
	kindAbsent  kind = 'x'
	kindFloor   kind = 'f'
)

type record struct {
	revision   int64
	freshUntil int64 // unix milliseconds
	id         int64
	firmID     int64
	no         int64
	kind       kind
	etag       []byte
	body       []byte
}

var (
	errCorrupt = errors.New("corrupt cache record")
	errForeign = errors.New("cache record of another listing")
)

func (r record) encode() []byte {
	b := make([]byte, 0, 64+len(r.etag)+len(r.body))
	b = append(b, recordVersion...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.revision, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.freshUntil, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.id, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.firmID, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.no, 10)
	b = append(b, ' ', byte(r.kind), ' ')
	b = append(b, r.etag...)
	b = append(b, '\n')
	return append(b, r.body...)
}

// decodeRecord parses a stored value. The returned record's slices point
// into b.
func decodeRecord(b []byte) (record, error) {
	head, body, ok := bytes.Cut(b, []byte{'\n'})
	if !ok {
		return record{}, errCorrupt
	}
	fields := bytes.Fields(head)
	if len(fields) != 8 || string(fields[0]) != recordVersion || len(fields[6]) != 1 {
		return record{}, errCorrupt
	}
	var r record
	var err error
	if r.revision, err = strconv.ParseInt(string(fields[1]), 10, 64); err != nil {
		return record{}, errCorrupt
	}
	if r.freshUntil, err = strconv.ParseInt(string(fields[2]), 10, 64); err != nil {
		return record{}, errCorrupt
	}
	if r.id, err = strconv.ParseInt(string(fields[3]), 10, 64); err != nil {
		return record{}, errCorrupt
	}
	if r.firmID, err = strconv.ParseInt(string(fields[4]), 10, 64); err != nil {
		return record{}, errCorrupt
	}
	if r.no, err = strconv.ParseInt(string(fields[5]), 10, 64); err != nil {
		return record{}, errCorrupt
	}
	r.kind = kind(fields[6][0])
	r.etag = fields[7]
	r.body = body
	switch r.kind {
	case kindActive, kindPassive:
		if len(body) == 0 || body[0] != '{' {
			return record{}, errCorrupt
		}
	case kindAbsent, kindFloor:
	default:
		return record{}, errCorrupt
	}
	return r, nil
}

// belongsTo reports whether a listing record may stand under k: a value
// copied or written under the wrong key is foreign. An absent record from
// a lookup that found nothing names no listing.
func (r record) belongsTo(k Key) bool {
	if r.kind == kindAbsent && r.id == 0 {
		return true
	}
	if k.ID > 0 {
		return r.id == k.ID
	}
	return r.firmID == k.FirmID && r.no == k.No
}

// weight is what a record kept in process costs the heap: the buffer its
// slices point into (a record decoded from a Redis value keeps that whole
// value; one made by recordOf, its body and ETag) rounded up to the
// allocator's size class, plus overhead.
func (r record) weight(overhead int) uint32 {
	n := cap(r.body) + len(r.etag) + recordHeader
	return uint32(min(sizeClass(n)+overhead, 1<<31))
}

// recordHeader approximates the text header before a record's body.
const recordHeader = 64

// sizeClass rounds n up as Go's allocator does, closely enough: small
// sizes to the next multiple of a power-of-two step, large ones to pages.
func sizeClass(n int) int {
	step := 16
	switch {
	case n > 32<<10:
		step = 8 << 10
	case n > 1024:
		step = 1 << (bits.Len(uint(n)) - 3) // 8 classes per doubling
	case n > 256:
		step = 64
	}
	return (n + step - 1) / step * step
}
