package cache

import (
	"bytes"
	"errors"
	"math/bits"
	"net/http"
	"strconv"
	"time"

	"github.com/realty-gateway/gateway/coding"
)

// A record is the value stored under a cache key: a one-line text header
// and then the response body, so a hit needs no JSON encoding.
//
//	v1 <revision> <freshUntilUnixMs> <id> <firmId> <no> <a|p|x> <etag>\n<body>
//	v1 <revision> <freshUntilUnixMs> <id> <firmId> <no> <a|p> <etag> z<br>,<gzip>,<zstd>\n<body><br><gzip><zstd>
//
// The revision comes first, so that the Lua guard reads it with one match
// in every form. The kinds are below; optional fields after the ETag:
//   - z<br>,<gzip>,<zstd>: the compressed bodies' lengths, 0 where not
//     made (variants.go);
//   - m<unixMs>: the version's Last-Modified (upstream.Encoded.Modified).
//
// A gateway of a release before a field reads a record with it as a miss
// and fills the key again without it.
const recordVersion = "v1"

// kind is what a record holds.
type kind byte

const (
	kindActive  kind = 'a' // an active listing
	kindPassive kind = 'p' // a passive listing
	kindAbsent  kind = 'x' // a cached "no such listing"
	// kindFloor holds nothing to serve: a fill older than its revision is
	// refused (the guard reads the revision alike), so that a read of an
	// old version in flight when a change was applied cannot land after it.
	kindFloor kind = 'f'
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
	// modified is the version's Last-Modified in unix milliseconds; 0:
	// none.
	modified int64
	// date is modified as an HTTP date, for copies kept in process (see
	// withDate); nil otherwise.
	date []byte
	// variants are the compressed bodies, shared by every copy of a
	// listing's record in this process; nil for absence and floors.
	variants *variants
	// held is the buffer that a decoded record's slices point into; 0 for
	// a record made here.
	held int
}

var (
	errCorrupt = errors.New("corrupt cache record")
	errForeign = errors.New("cache record of another listing")
)

func (r record) encode() []byte {
	var lengths [coding.Count]int
	extra := 0
	if r.variants.any() {
		for _, c := range coding.Compressed() {
			lengths[c] = len(r.variants.get(c))
			extra += lengths[c]
		}
	}
	b := make([]byte, 0, 96+len(r.etag)+len(r.body)+extra)
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
	if extra > 0 {
		b = append(b, " z"...)
		for i, c := range coding.Compressed() {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(lengths[c]), 10)
		}
	}
	if r.modified > 0 {
		b = strconv.AppendInt(append(b, " m"...), r.modified, 10)
	}
	b = append(b, '\n')
	b = append(b, r.body...)
	if extra > 0 {
		for _, c := range coding.Compressed() {
			b = append(b, r.variants.get(c)...)
		}
	}
	return b
}

// decodeRecord parses a stored value. The returned record's slices point
// into b.
func decodeRecord(b []byte) (record, error) {
	head, body, ok := bytes.Cut(b, []byte{'\n'})
	if !ok {
		return record{}, errCorrupt
	}
	fields := bytes.Fields(head)
	if len(fields) < 8 || string(fields[0]) != recordVersion || len(fields[6]) != 1 {
		return record{}, errCorrupt
	}
	r := record{held: cap(b)}
	var err error
	if last := fields[len(fields)-1]; len(fields) > 8 && last[0] == 'm' {
		if r.modified, err = strconv.ParseInt(string(last[1:]), 10, 64); err != nil || r.modified <= 0 {
			return record{}, errCorrupt
		}
		fields = fields[:len(fields)-1]
	}
	if len(fields) > 9 {
		return record{}, errCorrupt
	}
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
		r.variants = &variants{}
		if len(fields) == 9 && !r.readVariants(fields[8]) {
			return record{}, errCorrupt
		}
		if len(r.body) == 0 || r.body[0] != '{' {
			return record{}, errCorrupt
		}
	case kindAbsent, kindFloor:
		if len(fields) == 9 {
			return record{}, errCorrupt
		}
	default:
		return record{}, errCorrupt
	}
	return r, nil
}

// readVariants splits the variants that field ("z<br>,<gzip>,<zstd>")
// gives the lengths of off the end of r.body.
func (r *record) readVariants(field []byte) bool {
	lengths, ok := bytes.CutPrefix(field, []byte("z"))
	if !ok {
		return false
	}
	var n [coding.Count - 1]int
	total := 0
	for i := range n {
		var part []byte
		part, lengths, _ = bytes.Cut(lengths, []byte(","))
		v, err := strconv.Atoi(string(part))
		if err != nil || v < 0 {
			return false
		}
		n[i], total = v, total+v
	}
	if len(lengths) > 0 || total >= len(r.body) {
		return false
	}
	at := len(r.body) - total
	for i, c := range coding.Compressed() {
		if n[i] > 0 {
			v := r.body[at : at+n[i] : at+n[i]]
			r.variants.bodies[c].Store(&v)
		}
		at += n[i]
	}
	r.body = r.body[: len(r.body)-total : len(r.body)-total]
	return true
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
// allocator's size class, the variants made since, plus overhead.
func (r record) weight(overhead int) uint32 {
	n := r.held
	if n == 0 {
		n = cap(r.body) + len(r.etag) + recordHeader
	}
	if r.date != nil {
		overhead += sizeClass(cap(r.date))
	}
	return uint32(min(sizeClass(n)+r.variants.size()+overhead, 1<<31))
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

// withDate returns r with its Last-Modified formatted as an HTTP date
// (IMF-fixdate), once for a copy kept in process rather than on every
// hit. A time still ahead of now (a burst of writes records times ahead
// of the clock) is left to the answer, which sends no later than its own
// time.
func (r record) withDate(now time.Time) record {
	sec := r.modified / 1000
	if r.modified <= 0 || sec > now.Unix() || r.date != nil {
		return r
	}
	r.date = time.Unix(sec, 0).UTC().AppendFormat(make([]byte, 0, len(http.TimeFormat)), http.TimeFormat)
	return r
}
