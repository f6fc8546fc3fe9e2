package coding

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// listing is a listing response body of the benchmark's shape.
func listing(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/listing.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decode(t *testing.T, c Coding, b []byte) []byte {
	t.Helper()
	var r io.Reader
	switch c {
	case Gzip:
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	case Brotli:
		r = brotli.NewReader(bytes.NewReader(b))
	case Zstd:
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

// TestCompressDecodesToTheIdentityBytes: each coding, decoded by a reader
// of its format (the standard library's gzip), gives back exactly the
// input, and is smaller than it.
func TestCompressDecodesToTheIdentityBytes(t *testing.T) {
	z, err := NewCompressor()
	if err != nil {
		t.Fatal(err)
	}
	body := listing(t)
	for _, c := range Compressed() {
		t.Run(c.Name(), func(t *testing.T) {
			got, err := z.Compress(c, body)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(decode(t, c, got), body) {
				t.Fatal("decoded bytes differ from the input")
			}
			if len(got) >= len(body)/2 {
				t.Fatalf("%d bytes from %d: want under half", len(got), len(body))
			}
		})
	}
	if got, _ := z.Compress(Identity, body); !bytes.Equal(got, body) {
		t.Fatal("identity changed the bytes")
	}
}

// TestCompressIsTheSameOnEveryReplica: two compressors (two processes'
// worth), and one used concurrently, give byte for byte the same output,
// so that a CDN revalidating against another replica gets its 304.
func TestCompressIsTheSameOnEveryReplica(t *testing.T) {
	a, err := NewCompressor()
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewCompressor()
	if err != nil {
		t.Fatal(err)
	}
	body := listing(t)
	other := bytes.ReplaceAll(body, []byte("Moda"), []byte("Fenerbahce"))
	for _, c := range Compressed() {
		want, _ := a.Compress(c, body)
		_, _ = b.Compress(c, other) // a pooled encoder that saw other input
		done := make(chan []byte, 8)
		for range 8 {
			go func() {
				got, _ := b.Compress(c, body)
				done <- got
			}()
		}
		for range 8 {
			if got := <-done; !bytes.Equal(got, want) {
				t.Fatalf("%s: replicas differ: %d and %d bytes", c.Name(), len(got), len(want))
			}
		}
	}
}

func TestTags(t *testing.T) {
	tag := []byte(`"AbC-_12"`)
	tests := []struct {
		c    Coding
		want string
	}{
		{Identity, `"AbC-_12"`}, {Gzip, `"AbC-_12.gz"`}, {Brotli, `"AbC-_12.br"`}, {Zstd, `"AbC-_12.zst"`},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		got := string(AppendTag(nil, tag, tt.c))
		if got != tt.want {
			t.Errorf("AppendTag(%s) = %s, want %s", tt.c.Name(), got, tt.want)
		}
		if seen[got] {
			t.Errorf("%s: tag %s not distinct", tt.c.Name(), got)
		}
		seen[got] = true
		if back := string(IdentityTag([]byte(got))); back != string(tag) {
			t.Errorf("IdentityTag(%s) = %s", got, back)
		}
	}
	if got := string(AppendTag(nil, []byte(`W/"x"`), Gzip)); got != `W/"x.gz"` {
		t.Errorf("weak: %s", got)
	}
	for _, other := range []string{`"x"`, `".gz"`, `"x.gzip"`, `*`, `"`} {
		if got := string(IdentityTag([]byte(other))); got != other {
			t.Errorf("IdentityTag(%s) = %s", other, got)
		}
	}
}

func TestNegotiate(t *testing.T) {
	tests := []struct {
		name   string
		lines  []string // nil: no Accept-Encoding field
		want   Coding
		wantOK bool
	}{
		{"no field", nil, Identity, true},
		{"empty field", []string{""}, Identity, true},
		{"Chrome", []string{"gzip, deflate, br, zstd"}, Gzip, true},
		{"br and zstd only", []string{"br, zstd"}, Brotli, true},
		{"br preferred by q", []string{"gzip;q=0.9, br"}, Brotli, true},
		{"Varnish", []string{"gzip"}, Gzip, true},
		{"curl --compressed", []string{"deflate, gzip, br, zstd"}, Gzip, true},
		{"zstd only", []string{"zstd"}, Zstd, true},
		{"case and spaces", []string{"  GZip ;Q=1 "}, Gzip, true},
		{"x-gzip", []string{"x-gzip"}, Gzip, true},
		{"q picks gzip", []string{"br;q=0.5, gzip;q=0.8, zstd;q=0.7"}, Gzip, true},
		{"q picks zstd", []string{"br;q=0.1, gzip;q=0.2, zstd"}, Zstd, true},
		{"identity preferred by q", []string{"gzip;q=0.5, identity"}, Identity, true},
		{"equal q prefers compression", []string{"gzip;q=0.5, identity;q=0.5"}, Gzip, true},
		{"refused coding", []string{"br;q=0, gzip"}, Gzip, true},
		{"all refused, identity by default", []string{"br;q=0, gzip;q=0, zstd;q=0"}, Identity, true},
		{"unknown codings only", []string{"deflate, compress, foo"}, Identity, true},
		{"star", []string{"*"}, Gzip, true},
		{"star with a weaker gzip", []string{"*;q=0.9, gzip;q=0.1"}, Brotli, true},
		{"star refused, identity listed", []string{"*;q=0, identity"}, Identity, true},
		{"star refused", []string{"*;q=0"}, Identity, false},
		{"identity refused, gzip accepted", []string{"identity;q=0, gzip"}, Gzip, true},
		{"identity refused, nothing else", []string{"identity;q=0"}, Identity, false},
		{"identity refused, unknown only", []string{"identity;q=0, deflate"}, Identity, false},
		{"several lines", []string{"identity;q=0", "zstd"}, Zstd, true},
		{"bad q ignored", []string{"br;q=2, gzip;q=0.5000, zstd;q=x, identity;q=0"}, Identity, false},
		{"q three digits", []string{"gzip;q=0.001, br;q=0.002"}, Brotli, true},
		{"q 1.000", []string{"gzip;q=1.000, br;q=0.999"}, Gzip, true},
		{"q 1.5 invalid", []string{"gzip;q=1.5, br;q=0.3"}, Brotli, true},
		{"other parameters", []string{"gzip;level=1;q=0.2, br;foo=bar;q=0.1"}, Gzip, true},
		{"empty elements", []string{",, gzip ,,"}, Gzip, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var lines [][]byte
			for _, l := range tt.lines {
				lines = append(lines, []byte(l))
			}
			got, ok := Negotiate(lines)
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("Negotiate(%q) = %s, %v; want %s, %v", strings.Join(tt.lines, " | "), got.Name(), ok, tt.want.Name(), tt.wantOK)
			}
		})
	}
}

func TestNegotiateAllocatesNothing(t *testing.T) {
	lines := [][]byte{[]byte("gzip, deflate, br, zstd;q=0.9, identity;q=0.1")}
	if n := testing.AllocsPerRun(100, func() { Negotiate(lines) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

func BenchmarkNegotiateChrome(b *testing.B) {
	lines := [][]byte{[]byte("gzip, deflate, br, zstd")}
	b.ReportAllocs()
	for b.Loop() {
		Negotiate(lines)
	}
}

// BenchmarkCompress compresses a listing response with each coding: the
// CPU a version's first request in that coding costs, and the size.
func BenchmarkCompress(b *testing.B) {
	z, err := NewCompressor()
	if err != nil {
		b.Fatal(err)
	}
	body := listing(b)
	for _, c := range Compressed() {
		b.Run(c.Name(), func(b *testing.B) {
			var n int
			for b.Loop() {
				out, _ := z.Compress(c, body)
				n = len(out)
			}
			b.ReportMetric(float64(n), "bytes")
			b.ReportMetric(float64(n)/float64(len(body)), "ratio")
		})
	}
}
