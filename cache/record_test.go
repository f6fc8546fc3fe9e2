package cache

import (
	"bytes"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/coding"
)

// TestCopiesKeptInProcessCarryTheirHTTPDate: a copy the local tier keeps
// carries its Last-Modified formatted once, as the gateway would send it;
// a recorded time still ahead of the clock, or none, is left to the
// answer.
func TestCopiesKeptInProcessCarryTheirHTTPDate(t *testing.T) {
	now := time.Date(2026, 11, 28, 17, 5, 9, 0, time.UTC)
	tests := []struct {
		name     string
		modified int64
		want     string
	}{
		{name: "recorded before now", modified: now.Add(-90*time.Second).UnixMilli() + 999, want: "Sat, 28 Nov 2026 17:03:39 GMT"},
		{name: "recorded this second", modified: now.UnixMilli(), want: "Sat, 28 Nov 2026 17:05:09 GMT"},
		{name: "ahead of the clock", modified: now.Add(time.Second).UnixMilli()},
		{name: "unknown", modified: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := record{revision: 1, id: 1, firmID: 1, no: 1, kind: kindActive, etag: []byte(`"e"`), body: []byte(`{}`),
				freshUntil: now.Add(time.Hour).UnixMilli(), modified: tt.modified}
			f := newFront(1<<20, time.Hour, newFloors(time.Now))
			f.enable()
			f.keep(ByID(1), r, f.generation(), now)
			m := newMemory(1<<20, "")
			m.now = func() time.Time { return now }
			m.set(ByID(1).name(""), r, time.Hour)
			for tier, l := range map[string]localTier{"front": f, "memory": m} {
				got, ok := l.lookup(ByID(1), now)
				if !ok {
					t.Fatalf("%s: nothing kept", tier)
				}
				if string(got.date) != tt.want || string(got.entry(Hit).LastModifiedDate) != tt.want {
					t.Errorf("%s: date %q; want %q", tier, got.date, tt.want)
				}
			}
		})
	}
}

// TestRecordWithVariantsRoundTrips: a record with variants encodes and
// decodes to the same bytes, and a malformed lengths field is corrupt.
func TestRecordWithVariantsRoundTrips(t *testing.T) {
	r := record{revision: 3, freshUntil: 99, id: 1, firmID: 7, no: 3, kind: kindActive, etag: []byte(`"e"`),
		body: []byte(`{"id":1}`), variants: &variants{}}
	r.variants.keep(coding.Gzip, []byte("GZ"))
	r.variants.keep(coding.Zstd, []byte("ZSTD!"))
	b := r.encode()
	got, err := decodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.body) != `{"id":1}` || string(got.variants.get(coding.Gzip)) != "GZ" ||
		string(got.variants.get(coding.Zstd)) != "ZSTD!" || got.variants.get(coding.Brotli) != nil {
		t.Fatalf("decoded %q: body %q, variants %q %q %q", b, got.body, got.variants.get(coding.Brotli),
			got.variants.get(coding.Gzip), got.variants.get(coding.Zstd))
	}
	if !bytes.Equal(got.encode(), b) {
		t.Fatalf("encoded again: %q, want %q", got.encode(), b)
	}
	for _, bad := range []string{
		"v1 3 99 1 7 3 a \"e\" z0,2\n{\"id\":1}",         // two lengths
		"v1 3 99 1 7 3 a \"e\" z0,2,x\n{\"id\":1}",       // not a number
		"v1 3 99 1 7 3 a \"e\" z0,9,0\n{\"id\":1}",       // longer than the payload
		"v1 3 99 1 7 3 a \"e\" q0,2,0\n{\"id\":1}GZ",     // not z
		"v1 3 99 1 7 3 x \"e\" z0,2,0\n{\"id\":1}GZ",     // absence has no variants
		"v1 3 99 1 7 3 a \"e\" z0,2,0,1\n{\"id\":1}GZ!!", // four
	} {
		if _, err := decodeRecord([]byte(bad)); err == nil {
			t.Errorf("decodeRecord(%q) = nil error; want corrupt", bad)
		}
	}
}

// TestRecordKeepsLastModified: a record's Last-Modified (m<unixMs>, last)
// survives encoding, with and without variants, into the entry a read
// gets; a record without it has none; a malformed one is corrupt.
func TestRecordKeepsLastModified(t *testing.T) {
	for _, withVariants := range []bool{false, true} {
		r := record{revision: 3, freshUntil: 99, id: 1, firmID: 7, no: 3, kind: kindActive, etag: []byte(`"e"`),
			body: []byte(`{"id":1}`), modified: 1_795_000_000_123, variants: &variants{}}
		if withVariants {
			r.variants.keep(coding.Gzip, []byte("GZ"))
		}
		b := r.encode()
		got, err := decodeRecord(b)
		if err != nil {
			t.Fatalf("%q: %v", b, err)
		}
		if e := got.entry(Hit); e.LastModified != 1_795_000_000_123 || string(e.Body) != `{"id":1}` || !bytes.Equal(got.encode(), b) {
			t.Fatalf("%q: LastModified %d, body %q", b, e.LastModified, e.Body)
		}
		if e := got.entry(Hit); withVariants && string(got.variants.get(coding.Gzip)) != "GZ" {
			t.Fatalf("%q: variants lost (%d)", b, e.LastModified)
		}
	}
	if got, err := decodeRecord([]byte("v1 3 99 1 7 3 a \"e\"\n{\"id\":1}")); err != nil || got.entry(Hit).LastModified != 0 {
		t.Fatalf("a record of the release before: %v, LastModified %d", err, got.modified)
	}
	for _, bad := range []string{
		"v1 3 99 1 7 3 a \"e\" mx\n{\"id\":1}",             // not a number
		"v1 3 99 1 7 3 a \"e\" m0\n{\"id\":1}",             // no time
		"v1 3 99 1 7 3 a \"e\" m5 m6\n{\"id\":1}",          // twice
		"v1 3 99 1 7 3 a \"e\" z0,2,0 m5 m6\n{\"id\":1}GZ", // twice, after variants
	} {
		if _, err := decodeRecord([]byte(bad)); err == nil {
			t.Errorf("decodeRecord(%q) = nil error; want corrupt", bad)
		}
	}
}
