package cache

import (
	"testing"
	"time"
)

// TestAdmit: admission's answer for each case a copy can be in, one row
// per verdict it returns, and the checks that apply to one tier only.
func TestAdmit(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC).UnixMilli()
	fresh, stale := now+60_000, now-1
	listing := func(kind kind, freshUntil int64) *record {
		return &record{kind: kind, id: 5, firmID: 1, no: 7, revision: 3, freshUntil: freshUntil}
	}
	tests := []struct {
		name       string
		r          *record
		k          Key
		from       origin
		doubt      doubt
		floor      int64 // the listing's floor
		distrusted bool
		want       verdict
	}{
		{name: "a fresh listing from Redis", r: listing(kindActive, fresh), k: ByID(5), from: fromShared, want: admitted},
		{name: "a fresh passive listing by number", r: listing(kindPassive, fresh), k: ByNumber(1, 7), from: fromLocal, want: admitted},
		{name: "a fresh absence", r: &record{kind: kindAbsent, freshUntil: fresh}, k: ByID(5), from: fromShared, want: absent},
		{name: "past its freshness", r: listing(kindActive, stale), k: ByID(5), from: fromLocal, want: expired},
		{name: "an absence past its freshness", r: &record{kind: kindAbsent, freshUntil: stale}, k: ByID(5), from: fromShared, want: expired},
		{name: "Redis not trusted", r: listing(kindActive, fresh), k: ByID(5), from: fromShared, distrusted: true, want: untrusted},
		{name: "Redis not trusted, a local copy", r: listing(kindActive, fresh), k: ByID(5), from: fromLocal, distrusted: true, want: admitted},
		{name: "a key a write could not update", r: listing(kindActive, fresh), k: ByNumber(1, 7), from: fromShared, doubt: unwritten, want: floored},
		{name: "a key Redis may have missed a change of", r: listing(kindActive, fresh), k: ByID(5), from: fromShared, doubt: suspect, want: floored},
		{name: "a key in doubt, a local copy", r: listing(kindActive, fresh), k: ByID(5), from: fromLocal, doubt: unwritten, want: admitted},
		{name: "below its listing's floor", r: listing(kindActive, fresh), k: ByNumber(1, 7), from: fromShared, floor: 4, want: floored},
		{name: "at its listing's floor", r: listing(kindActive, fresh), k: ByNumber(1, 7), from: fromShared, floor: 3, want: admitted},
		{name: "a floor", r: &record{kind: kindFloor, id: 5, revision: 4, freshUntil: fresh}, k: ByID(5), from: fromShared, want: floored},
		{name: "another listing's copy", r: listing(kindActive, fresh), k: ByID(6), from: fromShared, want: foreign},
		{name: "another number's copy", r: listing(kindActive, fresh), k: ByNumber(1, 8), from: fromLocal, want: foreign},
		{name: "nothing readable", r: nil, k: ByID(5), from: fromShared, want: missing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fl := newFloors(func() time.Time { return time.UnixMilli(now) })
			c := &Cache{prefix: "p:", floors: fl, trust: newTrust(nil, nil, time.Second, fl, quietLog())}
			if !tt.distrusted {
				c.trust.state.Store(trusted)
			}
			switch {
			case tt.doubt == suspect:
				fl.suspects([]Key{tt.k})
			case tt.doubt != 0:
				fl.doubt(tt.k, tt.doubt, 4)
			}
			if tt.floor > 0 {
				fl.raise([]Invalidation{{ID: 5, FirmID: 1, No: 7, Revision: tt.floor}}, time.Minute)
			}
			if got := c.admit(tt.k, tt.r, now, tt.from); got != tt.want {
				t.Fatalf("admit = %d; want %d", got, tt.want)
			}
		})
	}
}
