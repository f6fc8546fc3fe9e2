package cache

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

	"github.com/realty-gateway/gateway/coding"
	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/upstream"
)

// inflate decodes b of coding c.
func inflate(t *testing.T, c coding.Coding, b []byte) []byte {
	t.Helper()
	var r io.Reader
	switch c {
	case coding.Gzip:
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	case coding.Brotli:
		r = brotli.NewReader(bytes.NewReader(b))
	case coding.Zstd:
		zr, err := zstd.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		r = zr
	default:
		return b
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s: %v", c.Name(), err)
	}
	return out
}

// read answers a read of k as the gateway does: from memory, else Get.
func read(t *testing.T, c *Cache, k Key) Entry {
	t.Helper()
	if e, ok := c.cachedAt(k, time.Now()); ok {
		return e
	}
	e, err := c.Get(context.Background(), k, coding.Identity, time.Now())
	if err != nil {
		t.Fatalf("Get(%v): %v", k, err)
	}
	return e
}

// TestVariantsAreMadeOncePerVersion: on every kind of cache, each coding
// of a version is compressed once, at its first request, and decodes to
// the identity body; later reads of either key, from whichever tier,
// compress nothing. A write makes a new version, whose variants are made
// anew and carry the new body.
func TestVariantsAreMadeOncePerVersion(t *testing.T) {
	for _, kind := range cacheKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			src := newSource(listing(1, 7, 3, true))
			c := kind.give(src)
			keys := []Key{ByID(1), ByNumber(7, 3)}
			e := read(t, c, keys[0])
			for _, cod := range coding.Compressed() {
				b, err := c.Variant(e, cod)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(inflate(t, cod, b), e.Body) {
					t.Fatalf("%s: does not decode to the identity body", cod.Name())
				}
			}
			if got := c.Stats().Compressed; got != 3 {
				t.Fatalf("%d compressions for one version's 3 codings", got)
			}
			if rt := redisOf(c); rt != nil {
				waitForVariants(t, rt, c.prefix, keys...)
			}
			for range 5 {
				for _, k := range keys {
					e := read(t, c, k)
					for _, cod := range coding.Compressed() {
						b, err := c.Variant(e, cod)
						if err != nil {
							t.Fatal(err)
						}
						if !bytes.Equal(inflate(t, cod, b), e.Body) {
							t.Fatalf("%v, %s: does not decode to the identity body", k, cod.Name())
						}
					}
				}
			}
			before := c.Stats().Compressed
			if before != 3 {
				t.Fatalf("reads of the version's two keys compressed %d more times", before-3)
			}

			next := listing(1, 7, 3, true)
			next.Title = "rewritten"
			if _, err := c.Replace(context.Background(), src.listings[1], next, upstream.Precondition{}); err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				e := read(t, c, k)
				for _, cod := range coding.Compressed() {
					b, err := c.Variant(e, cod)
					if err != nil {
						t.Fatal(err)
					}
					if body := inflate(t, cod, b); !bytes.Contains(body, []byte(`"title":"rewritten"`)) {
						t.Fatalf("%v, %s after the write: %s", k, cod.Name(), body)
					}
				}
			}
			if got := c.Stats().Compressed; got == before {
				t.Fatal("the new version was served in the old version's variants")
			}
		})
	}
}

// waitForVariants waits until the Redis records of keys carry every
// coding's variant.
func waitForVariants(t *testing.T, rt *redisTier, prefix string, keys ...Key) {
	t.Helper()
	for _, k := range keys {
		testenv.WaitFor(t, func() bool {
			v, err := rt.rdb.Get(context.Background(), k.name(prefix)).Bytes()
			if err != nil {
				return false
			}
			r, err := decodeRecord(v)
			return err == nil && r.variants.get(coding.Brotli) != nil && r.variants.get(coding.Gzip) != nil &&
				r.variants.get(coding.Zstd) != nil
		})
	}
}

// TestVariantsReachOtherGateways: a variant one gateway made is added to
// the version's Redis records, so another gateway's read of either key
// finds it made, and compresses nothing.
func TestVariantsReachOtherGateways(t *testing.T) {
	src := newSource(listing(1, 7, 3, true))
	a, rdb, prefix := newRedisCache(t, src)
	b := must(t)(NewRedis(rdb, testRedisTimeout, testConfig(), testDeps(src, prefix)))
	e := read(t, a, ByID(1))
	made := map[coding.Coding][]byte{}
	for _, cod := range coding.Compressed() {
		v, err := a.Variant(e, cod)
		if err != nil {
			t.Fatal(err)
		}
		made[cod] = v
	}
	waitForVariants(t, redisOf(a), prefix, ByID(1), ByNumber(7, 3))
	for _, k := range []Key{ByID(1), ByNumber(7, 3)} {
		e := read(t, b, k)
		for _, cod := range coding.Compressed() {
			v, err := b.Variant(e, cod)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(v, made[cod]) {
				t.Fatalf("%v, %s: another gateway's bytes differ", k, cod.Name())
			}
		}
	}
	if got := b.Stats().Compressed; got != 0 {
		t.Fatalf("the other gateway compressed %d times; want 0", got)
	}
}

// TestVariantsNeverReplaceANewerVersion: variants made from an old
// version do not land on a key that holds a newer one.
func TestVariantsNeverReplaceANewerVersion(t *testing.T) {
	src := newSource(listing(1, 7, 3, true))
	c, rdb, prefix := newRedisCache(t, src)
	old := read(t, c, ByID(1))
	next := listing(1, 7, 3, true)
	next.Title = "newer"
	if _, err := c.Replace(context.Background(), src.listings[1], next, upstream.Precondition{}); err != nil {
		t.Fatal(err)
	}
	r := old.record()
	r.variants.keep(coding.Gzip, []byte("old gzip"))
	name := ByID(1).name(prefix)
	done, err := rdb.Eval(context.Background(), addVariants.src, []string{name}, r.revision, string(r.etag), r.encode()).Int()
	if err != nil || done != 0 {
		t.Fatalf("the script answered %d, %v; want 0: nothing replaced", done, err)
	}
	v, err := rdb.Get(context.Background(), name).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := decodeRecord(v); err != nil || !bytes.Contains(got.body, []byte("newer")) || got.variants.get(coding.Gzip) != nil {
		t.Fatalf("the key holds %q (%v); want the newer version without the old one's variants", v, err)
	}
}

// TestVariantsAreWeighed: the local tiers charge a variant made after the
// entry was kept.
func TestVariantsAreWeighed(t *testing.T) {
	for _, kind := range cacheKinds(t) {
		if kind.name == "redis" {
			continue // no tier in this process
		}
		t.Run(kind.name, func(t *testing.T) {
			body := strings.Repeat("sea view, ", 400)
			l := listing(1, 7, 3, true)
			l.Title = body
			c := kind.give(newSource(l))
			read(t, c, ByID(1))
			e := read(t, c, ByID(1)) // from the local tier now
			weight := func() uint64 {
				if c.front != nil {
					c.front.cache.CleanUp() // the tier's size follows its writes lazily
					return c.front.cache.WeightedSize()
				}
				lt := c.shared.(*memory)
				lt.cache.CleanUp()
				return lt.cache.WeightedSize()
			}
			before := weight()
			v, err := c.Variant(e, coding.Zstd)
			if err != nil {
				t.Fatal(err)
			}
			if got := weight(); got < before+uint64(len(v)) {
				t.Fatalf("weight %d after a %d-byte variant, from %d", got, len(v), before)
			}
		})
	}
}

// TestCompressingMissCarriesItsVariant: a miss for a client that accepts
// a coding fills both keys with the body compressed in it, in the same two
// guarded sets: no later round trip adds the variant, and the answer
// needs no compression of its own.
func TestCompressingMissCarriesItsVariant(t *testing.T) {
	rdb, prefix := redisFor(t)
	trips := &roundTrips{}
	rdb.AddHook(trips)
	cfg := testConfig()
	cfg.LocalBytes = 0
	c := must(t)(NewRedis(rdb, time.Second, cfg, testDeps(newSource(listing(42, 7, 3, true)), prefix)))
	ctx := context.Background()
	e, err := c.Get(ctx, ByID(42), coding.Gzip, time.Now())
	if err != nil || e.State != Miss {
		t.Fatalf("Get = %v, %v; want a MISS", e.State, err)
	}
	b, err := c.Variant(e, coding.Gzip)
	if err != nil || !bytes.Equal(inflate(t, coding.Gzip, b), e.Body) {
		t.Fatalf("gzip variant: %v", err)
	}
	if n := c.Stats().Compressed; n != 1 {
		t.Errorf("%d compressions; want the fill's one", n)
	}
	time.Sleep(100 * time.Millisecond) // an extra write would go out with the auto-pipeline's next batch
	trips.mu.Lock()
	var sent []string
	for _, p := range trips.pipelines {
		sent = append(sent, p...)
	}
	sent = slices.DeleteFunc(append(sent, trips.commands...), func(name string) bool { return name == "hello" || name == "client" })
	trips.mu.Unlock()
	sends := map[string]int{}
	for _, name := range sent {
		sends[name]++
	}
	if len(sends) != 2 || sends["get"] != 1 || sends["evalsha"] != 2 {
		t.Fatalf("a compressing miss sent %v; want one GET and two guarded sets", sent)
	}
	for _, k := range []Key{ByID(42), ByNumber(7, 3)} {
		v, err := rdb.Get(ctx, k.name(prefix)).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		r, err := decodeRecord(v)
		if err != nil || !bytes.Equal(r.variants.get(coding.Gzip), b) {
			t.Fatalf("%s holds no gzip variant: %v", k.name(prefix), err)
		}
	}
}
