package cache

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/realty-gateway/gateway/coding"
	"github.com/realty-gateway/gateway/upstream"
)

// fullListing is a listing with every member set, the size of a real page.
func fullListing() upstream.Listing {
	s := func(v string) *string { return &v }
	i := func(v int64) *int64 { return &v }
	f := func(v float64) *float64 { return &v }
	b := func(v bool) *bool { return &v }
	l := upstream.Listing{
		ID: 77, FirmID: 3, FirmUserID: 9, No: 12, Title: "Sea-view flat with garden", IsActive: true, Revision: 1,
		CreatedDate: 1700000000000, UpdatedDate: 1700000100000, EndDate: i(1800000000000),
		CategoryID: i(1), SubCategoryID: i(4), Note: s("Viewing by appointment"), RealtyDetailURL: s("https://example.com/realty/77"),
		RealtyIdentificationNo: s("TR-34-1203-77"), EnergyDocumentNo: s("E-2024-0077"),
		Location: upstream.Location{CityID: i(34), CityName: s("Istanbul"), CountyID: i(12), CountyName: s("Kadikoy"),
			DistrictID: i(1203), DistrictName: s("Moda"), Latitude: f(40.98), Longitude: f(29.02), NearLocation: b(true)},
		Attributes: upstream.Attributes{Description: s("Bright three-room flat, renovated in 2023, close to the ferry."),
			Price: f(8500000), PriceCurrencyType: s("TRY"), Room: f(3), LivingRoom: f(1), BathRoom: f(2), Sqm: f(120), NetSqm: f(105),
			Age: f(12), FloorCount: f(6), HeatingID: i(2), FloorID: i(4), Furnished: b(false), SideIDList: []int64{1, 2, 3},
			SelectedAttributeList: []upstream.SelectedAttribute{{GroupID: 1, SelectedIDs: []int64{3, 4}}, {GroupID: 2, SelectedIDs: []int64{7}}}},
	}
	for n := range 12 {
		l.RealtyFiles = append(l.RealtyFiles, upstream.RealtyFile{ID: int64(n + 1), ImageURL: s("https://img.example.com/77/photo.jpg"),
			SortOrder: i(int64(n)), ImageType: s("IMAGE"), Status: s("APPROVED")})
	}
	l.Normalize()
	return l
}

// BenchmarkHit compares a hit on this cache, which returns the stored
// response bytes, with what a general-purpose cache in the same place does:
// fetch the cached JSON, decode it into the listing, encode the response.
// Both read the same Redis; the ratio of their ns/op is the saving.
func BenchmarkHit(b *testing.B) {
	src := newSource(fullListing())
	c, rdb, prefix := newRedisCache(b, src)
	ctx := context.Background()
	if _, err := c.Get(ctx, ByID(77), coding.Identity, time.Now()); err != nil {
		b.Fatal(err)
	}
	doc, _ := json.Marshal(fullListing())
	rdb.Set(ctx, prefix+"generic:77", doc, 0)
	b.Cleanup(func() { rdb.Del(ctx, prefix+"realty:id:77", prefix+"realty:listing:3-12", prefix+"generic:77") })

	b.Run("gateway bytes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			e, err := c.Get(ctx, ByID(77), coding.Identity, time.Now())
			if err != nil || e.State != Hit {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline decode+encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			raw, err := rdb.Get(ctx, prefix+"generic:77").Bytes()
			if err != nil {
				b.Fatal(err)
			}
			var l upstream.Listing
			if err := json.Unmarshal(raw, &l); err != nil {
				b.Fatal(err)
			}
			if _, err := json.Marshal(l); err != nil {
				b.Fatal(err)
			}
		}
	})
	local := must(b)(NewLocal(testConfig(), testDeps(src, "")))
	if _, err := local.Get(ctx, ByID(77), coding.Identity, time.Now()); err != nil {
		b.Fatal(err)
	}
	b.Run("in-process tier", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := local.Get(ctx, ByID(77), coding.Identity, time.Now()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLocalTier compares the front tier (otter, S3-FIFO, lock-free
// reads) with a plain mutex-guarded LRU holding the same entries, under 2
// and 16 goroutines reading a hot set of 1,000 listings.
func BenchmarkLocalTier(b *testing.B) {
	const hot = 1000
	now := time.Now()
	r := frontRecord(1, 1, `{"title":"x"}`, now.Add(time.Hour))
	f := newFront(64<<20, time.Hour, newFloors(time.Now))
	f.enable()
	plain, _ := lru.New[Key, *frontEntry](hot * 2)
	var mu sync.Mutex
	for id := int64(1); id <= hot; id++ {
		r.id = id
		f.keep(ByID(id), r, f.generation(), now)
		plain.Add(ByID(id), &frontEntry{r: r, expires: now.Add(time.Hour).UnixNano()})
	}
	impls := []struct {
		name string
		get  func(k Key) (*record, bool)
	}{
		{name: "otter", get: func(k Key) (*record, bool) { return f.lookup(k, now) }},
		{name: "mutex LRU", get: func(k Key) (*record, bool) {
			mu.Lock()
			fe, ok := plain.Get(k)
			mu.Unlock()
			if !ok || now.UnixNano() >= fe.expires {
				return nil, false
			}
			return &fe.r, true
		}},
	}
	for _, goroutines := range []int{2, 16} {
		for _, impl := range impls {
			b.Run(fmt.Sprintf("%s/%d goroutines", impl.name, goroutines), func(b *testing.B) {
				b.ReportAllocs()
				b.SetParallelism(max(goroutines/runtime.GOMAXPROCS(0), 1))
				var seed atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					id := seed.Add(7919)
					for pb.Next() {
						id = id%hot + 1
						if _, ok := impl.get(ByID(id)); !ok {
							b.Fatal("miss")
						}
					}
				})
			})
		}
	}
}
