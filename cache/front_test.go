package cache

import (
	"bytes"
	"testing"
	"time"
)

func frontRecord(id, revision int64, body string, freshUntil time.Time) record {
	return record{revision: revision, id: id, firmID: 1, no: id, kind: kindActive, etag: []byte(`"e"`),
		body: []byte(body), freshUntil: freshUntil.UnixMilli()}
}

func TestFrontRefusesOlderVersions(t *testing.T) {
	now := time.Now()
	fresh := now.Add(time.Minute)
	tests := []struct {
		name    string
		give    func(f *front) // after v5 was put and v6 invalidated it
		wantHit bool
		want    string
	}{
		{name: "the invalidated version is gone"},
		{name: "a slow fill of the old version is refused",
			give: func(f *front) { f.keep(ByID(7), frontRecord(7, 5, "{v5}", fresh), f.generation(), now) }},
		{name: "the new version is kept", wantHit: true, want: "{v6}",
			give: func(f *front) { f.keep(ByID(7), frontRecord(7, 6, "{v6}", fresh), f.generation(), now) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFront(1<<20, time.Hour, newFloors(time.Now))
			f.enable()
			f.keep(ByID(7), frontRecord(7, 5, "{v5}", fresh), f.generation(), now)
			if _, ok := f.lookup(ByID(7), now); !ok {
				t.Fatal("v5 was not kept")
			}
			items := []Invalidation{{ID: 7, FirmID: 1, No: 7, Revision: 6}}
			f.floors.raise(items, time.Minute)
			f.invalidate(items)
			if tt.give != nil {
				tt.give(f)
			}
			got := ""
			e, ok := f.lookup(ByID(7), now)
			if ok {
				got = string(e.body)
			}
			if ok != tt.wantHit || got != tt.want && ok {
				t.Fatalf("get = %q, %v; want %q, %v", got, ok, tt.want, tt.wantHit)
			}
		})
	}
}

func TestFrontLostSubscription(t *testing.T) {
	now := time.Now()
	f := newFront(1<<20, time.Hour, newFloors(time.Now))
	f.enable()
	gen := f.generation()
	f.keep(ByID(1), frontRecord(1, 1, "{a}", now.Add(time.Minute)), gen, now)
	f.disable()
	if _, ok := f.lookup(ByID(1), now); ok {
		t.Fatal("a disabled tier answered")
	}
	f.enable()
	if _, ok := f.lookup(ByID(1), now); ok {
		t.Fatal("an entry from before the lost subscription survived it")
	}
	f.keep(ByID(1), frontRecord(1, 1, "{a}", now.Add(time.Minute)), gen, now)
	if _, ok := f.lookup(ByID(1), now); ok {
		t.Fatal("a put read before the subscription was lost was kept")
	}
}

func TestFrontMaxAgeAndFreshness(t *testing.T) {
	now := time.Now()
	f := newFront(1<<20, 2*time.Second, newFloors(time.Now))
	f.enable()
	f.keep(ByID(1), frontRecord(1, 1, "{a}", now.Add(time.Minute)), f.generation(), now)
	f.keep(ByID(2), frontRecord(2, 1, "{b}", now.Add(time.Second)), f.generation(), now)
	for _, tt := range []struct {
		k    Key
		at   time.Duration
		want bool
	}{{ByID(1), 1900 * time.Millisecond, true}, {ByID(1), 2 * time.Second, false}, {ByID(2), 900 * time.Millisecond, true}, {ByID(2), time.Second, false}} {
		if _, ok := f.lookup(tt.k, now.Add(tt.at)); ok != tt.want {
			t.Errorf("listing %d at +%v: hit %v, want %v", tt.k.ID, tt.at, ok, tt.want)
		}
	}
}

func TestFrontIsBoundedByBytes(t *testing.T) {
	now := time.Now()
	f := newFront(1<<20, time.Hour, newFloors(time.Now))
	f.enable()
	body := "{" + string(bytes.Repeat([]byte("x"), 100<<10)) + "}"
	for id := int64(1); id <= 100; id++ {
		f.keep(ByID(id), frontRecord(id, 1, body, now.Add(time.Minute)), f.generation(), now)
	}
	f.cache.CleanUp()
	if w := f.cache.WeightedSize(); w > 1<<20 {
		t.Fatalf("weighted size %d over the 1 MiB bound", w)
	}
	if n := f.cache.EstimatedSize(); n == 0 || n > 10 {
		t.Fatalf("%d entries of 100 KiB kept under 1 MiB", n)
	}
}
