package cache

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/upstream"
)

// heapPerEntry fills a tier with n entries through put and returns the
// heap they hold per entry and the weight charged per entry.
func heapPerEntry(t *testing.T, n int, put func(i int, r record) uint32) (heap, weight float64) {
	t.Helper()
	body := `{"id":1,"title":"` + strings.Repeat("x", 1650) + `"}`
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var charged uint64
	for i := range n {
		// As a Redis hit leaves it: the record's slices point into the
		// value read.
		r, err := decodeRecord(record{revision: 1, id: int64(i + 1), firmID: 1, no: int64(i + 1), kind: kindActive,
			etag: upstream.ETag([]byte(body)), body: []byte(body), freshUntil: time.Now().Add(time.Hour).UnixMilli()}.encode())
		if err != nil {
			t.Fatal(err)
		}
		charged += uint64(put(i, r))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n), float64(charged) / float64(n)
}

// withinHeap runs measure, which fills a tier of its own and returns the
// heap per entry and the weight charged per entry, and checks that the
// weight is within 20 % of the heap. Memory that other tests' goroutines
// free while it runs skews one measurement, never three in a row: it
// measures again, and fails only when every try is out of bounds.
func withinHeap(t *testing.T, measure func() (heap, weight float64)) {
	t.Helper()
	var tries []string
	for range 3 {
		heap, weight := measure()
		t.Logf("heap per entry %.0f bytes, charged %.0f (%.2f×)", heap, weight, weight/heap)
		if weight >= 0.8*heap && weight <= 1.2*heap {
			return
		}
		tries = append(tries, fmt.Sprintf("%.0f for %.0f", weight, heap))
	}
	t.Fatalf("charged bytes per entry for bytes on the heap: %s; want within 20 %%", strings.Join(tries, ", "))
}

// TestFrontWeigherMatchesTheHeap: what the local tier charges an entry
// against its byte bound is what the entry costs the heap, within 20 %.
func TestFrontWeigherMatchesTheHeap(t *testing.T) {
	withinHeap(t, func() (float64, float64) {
		f := newFront(1<<30, time.Hour, newFloors(time.Now))
		f.enable()
		const n = 20_000
		heap, weight := heapPerEntry(t, n, func(i int, r record) uint32 {
			f.keep(ByID(int64(i+1)), r, f.generation(), time.Now())
			return r.weight(frontEntryOverhead)
		})
		if got := f.cache.EstimatedSize(); got != n {
			t.Fatalf("%d entries kept; want %d", got, n)
		}
		runtime.KeepAlive(f)
		return heap, weight
	})
}

// TestLocalWeigherMatchesTheHeap: the same for the only tier of a gateway
// without Redis.
func TestLocalWeigherMatchesTheHeap(t *testing.T) {
	withinHeap(t, func() (float64, float64) {
		cfg := testConfig()
		cfg.LocalBytes = 1 << 30
		c := must(t)(NewLocal(cfg, testDeps(newSource(), "")))
		lt := c.shared.(*memory)
		const n = 20_000
		heap, weight := heapPerEntry(t, n, func(i int, r record) uint32 {
			name := ByID(int64(i + 1)).name("")
			lt.set(name, r, time.Hour)
			v, _ := lt.cache.GetIfPresent(name)
			return v.weight
		})
		runtime.KeepAlive(c)
		return heap, weight
	})
}

// TestExpiredEntriesLeaveMemory: entries past their time are removed, not
// kept until the byte bound evicts them.
func TestExpiredEntriesLeaveMemory(t *testing.T) {
	const life = 500 * time.Millisecond
	f := newFront(1<<30, life, newFloors(time.Now))
	f.enable()
	cfg := testConfig()
	cfg.LocalBytes = 1 << 30
	local := must(t)(NewLocal(cfg, testDeps(newSource(), ""))).shared.(*memory)
	for i := range 1000 {
		r := record{revision: 1, id: int64(i + 1), firmID: 1, no: int64(i + 1), kind: kindActive, etag: []byte(`"e"`),
			body: []byte(`{"id":1}`), freshUntil: time.Now().Add(time.Hour).UnixMilli()}
		f.keep(ByID(int64(i+1)), r, f.generation(), time.Now())
		local.set(ByID(int64(i+1)).name(""), r, life)
	}
	// On a loaded machine the fill itself may outlast their life: some
	// entries may be gone already, but not all.
	if n, m := f.cache.EstimatedSize(), local.cache.EstimatedSize(); n == 0 || m == 0 || n > 1000 || m > 1000 {
		t.Fatalf("%d and %d entries right after the fill; want 1 to 1000 each", n, m)
	}
	testenv.Eventually(t, "every expired entry removed", func() bool {
		f.cache.CleanUp()
		local.cache.CleanUp()
		return f.cache.EstimatedSize() == 0 && local.cache.EstimatedSize() == 0
	})
}
