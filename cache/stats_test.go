package cache

import (
	"encoding/json"
	"reflect"
	"sync/atomic"
	"testing"
)

// Stats is read by name from /stats by operators and the fault suite: its
// JSON must keep its members, in order.
func TestStatsJSON(t *testing.T) {
	var s Stats
	v := reflect.ValueOf(&s).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Bool {
			f.SetBool(true)
		} else {
			f.SetUint(uint64(i + 1))
		}
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"hits":1,"misses":2,"stale":3,"storeLoads":4,"tierErrors":5,"corrupt":6,"incoherent":7,"localHits":8,` +
		`"tierHits":9,"negative":10,"shared":11,"localTierOn":true,"redisTrusted":true,"announced":14,"unacknowledged":15,"compressed":16,"coalesced":17}`
	if string(b) != want {
		t.Errorf("Stats as JSON\n%s\nwant\n%s", b, want)
	}
}

// Every counter of a Cache reaches its member of Stats.
func TestStatsSnapshotReadsEveryCounter(t *testing.T) {
	var n counters
	for i, c := range []*atomic.Uint64{&n.hits, &n.misses, &n.stale, &n.storeLoads, &n.tierErrors, &n.corrupt,
		&n.incoherent, &n.localHits, &n.tierHits, &n.negative, &n.joined, &n.compressed, &n.coalesced} {
		c.Add(uint64(i + 1))
	}
	want := Stats{Hits: 1, Misses: 2, Stale: 3, StoreLoads: 4, TierErrors: 5, Corrupt: 6,
		Incoherent: 7, LocalHits: 8, TierHits: 9, Negative: 10, Shared: 11, Compressed: 12, Coalesced: 13}
	if got := n.snapshot(); got != want {
		t.Errorf("snapshot %+v, want %+v", got, want)
	}
}
