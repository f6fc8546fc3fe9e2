package cache

import (
	"testing"
	"time"
)

// TestFloors: what each way of raising a floor refuses, and how long.
func TestFloors(t *testing.T) {
	start := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	v := func(id, revision int64) *record { return &record{kind: kindActive, id: id, revision: revision} }
	tests := []struct {
		name    string
		give    func(f *floors)
		after   time.Duration // how long after the raise the copy is judged
		k       Key
		r       *record
		refused bool
	}{
		{name: "no floor", k: ByID(7), r: v(7, 1)},
		{name: "below the listing's revision, by id",
			give: raiseTo(7, 5), k: ByID(7), r: v(7, 4), refused: true},
		{name: "below the listing's revision, by number",
			give: raiseTo(7, 5), k: ByNumber(1, 7), r: v(7, 4), refused: true},
		{name: "at the listing's revision", give: raiseTo(7, 5), k: ByID(7), r: v(7, 5)},
		{name: "another listing", give: raiseTo(7, 5), k: ByNumber(1, 7), r: v(8, 1)},
		{name: "a revision stands a minute", give: raiseTo(7, 5), after: 59 * time.Second, k: ByID(7), r: v(7, 4), refused: true},
		{name: "and no longer", give: raiseTo(7, 5), after: time.Minute, k: ByID(7), r: v(7, 4)},
		{name: "a lower revision leaves the floor", give: func(f *floors) { raiseTo(7, 5)(f); raiseTo(7, 3)(f) },
			k: ByID(7), r: v(7, 4), refused: true},
		{name: "an unwritten key refuses any copy, for as long as it is unwritten",
			give: func(f *floors) { f.doubt(ByNumber(1, 7), unwritten, 5) }, after: time.Hour, k: ByNumber(1, 7), r: v(7, 9), refused: true},
		{name: "until a write reaches it",
			give: func(f *floors) { f.doubt(ByNumber(1, 7), unwritten, 5); f.written(ByNumber(1, 7)) }, k: ByNumber(1, 7), r: v(7, 4)},
		{name: "a suspect refuses any copy",
			give: func(f *floors) { f.suspects([]Key{ByID(7)}) }, after: time.Hour, k: ByID(7), r: v(7, 9), refused: true},
		{name: "until the feed caught up",
			give: func(f *floors) { f.suspects([]Key{ByID(7)}); f.caughtUp() }, k: ByID(7), r: v(7, 9)},
		{name: "new suspects replace the old",
			give: func(f *floors) { f.suspects([]Key{ByID(7)}); f.suspects([]Key{ByID(8)}) }, k: ByID(7), r: v(7, 9)},
		{name: "the feed catching up leaves an unwritten key in doubt",
			give: func(f *floors) { f.doubt(ByID(7), unwritten, 5); f.suspects([]Key{ByID(7)}); f.caughtUp() },
			k:    ByID(7), r: v(7, 9), refused: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := start
			f := newFloors(func() time.Time { return now })
			if tt.give != nil {
				tt.give(f)
			}
			now = now.Add(tt.after)
			if got := f.refuses(tt.k, tt.r, now); got != tt.refused {
				t.Fatalf("refuses = %v; want %v", got, tt.refused)
			}
		})
	}
}

func raiseTo(id, revision int64) func(f *floors) {
	return func(f *floors) {
		f.raise([]Invalidation{{ID: id, FirmID: 1, No: id, Revision: revision}}, time.Minute)
	}
}

// TestFloorsAreForgotten: floors that no longer stand leave the map once
// it is large, and a key whose doubt ends with no revision standing at once.
func TestFloorsAreForgotten(t *testing.T) {
	now := time.Now()
	f := newFloors(func() time.Time { return now })
	for id := range int64(floorsKept) {
		f.raise([]Invalidation{{ID: id + 1, Revision: 1}}, time.Second)
	}
	f.doubt(ByNumber(1, 1), unwritten, 1)
	f.written(ByNumber(1, 1))
	if got := f.count.Load(); got != floorsKept {
		t.Fatalf("%d floors; want %d: the doubt ended and no revision stands on its key", got, floorsKept)
	}
	now = now.Add(time.Second)
	f.raise([]Invalidation{{ID: floorsKept + 1, Revision: 1}}, time.Second)
	if got := f.count.Load(); got != 1 {
		t.Fatalf("%d floors after a sweep; want only the one standing", got)
	}
}
