// Package coding owns the content codings of listing responses (RFC 9110
// §8.4): choosing one from a request's Accept-Encoding (§12.5.3), the
// compressors (gzip and zstd from klauspost/compress, br from
// andybalholm/brotli, each at a fixed level), and the entity tag of each
// coding of a representation (§8.8.3). It knows nothing of listings.
//
// The same input gives the same compressed bytes on every replica of one
// release: the encoders' settings are fixed and each runs on one goroutine.
//
// Concurrency: every function, and a Compressor, is safe for concurrent
// use; a Compressor pools its encoders.
package coding

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Coding is a content coding that the gateway sends.
type Coding uint8

// The codings. Their order is that of a cache record's variants
// (cache/record.go); Negotiate's preference is its own.
const (
	Identity Coding = iota
	Brotli
	Gzip
	Zstd
	// Count is how many codings there are, Identity included.
	Count
)

// Compressed returns the codings other than Identity.
func Compressed() [Count - 1]Coding { return [Count - 1]Coding{Brotli, Gzip, Zstd} }

// Name is the coding's token in Accept-Encoding and Content-Encoding.
func (c Coding) Name() string {
	switch c {
	case Brotli:
		return "br"
	case Gzip:
		return "gzip"
	case Zstd:
		return "zstd"
	default:
		return "identity"
	}
}

// tagSuffix is put inside an identity tag's closing quote to name the
// coding's variant. Identity tags are base64url, which has no '.', so a
// suffix is never part of one.
func (c Coding) tagSuffix() string {
	switch c {
	case Brotli:
		return ".br"
	case Gzip:
		return ".gz"
	case Zstd:
		return ".zst"
	default:
		return ""
	}
}

// AppendTag appends to dst the entity tag of coding c of a representation
// whose identity tag is tag: "<tag>.gz" for gzip, tag itself for identity.
// A weak tag stays weak.
func AppendTag(dst, tag []byte, c Coding) []byte {
	suffix := c.tagSuffix()
	if suffix == "" || len(tag) < 2 || tag[len(tag)-1] != '"' {
		return append(dst, tag...)
	}
	dst = append(dst, tag[:len(tag)-1]...)
	dst = append(dst, suffix...)
	return append(dst, '"')
}

// IdentityTag returns the identity tag that a coding's tag was made from:
// tag without its coding's suffix. Other tags are returned as they are. It
// may shorten tag in place.
func IdentityTag(tag []byte) []byte {
	if len(tag) < 2 || tag[len(tag)-1] != '"' {
		return tag
	}
	for _, c := range Compressed() {
		if inner, ok := bytes.CutSuffix(tag[:len(tag)-1], []byte(c.tagSuffix())); ok && len(inner) > 1 {
			return append(inner, '"')
		}
	}
	return tag
}

// Levels: gzip's default, the level nginx's gzip_comp_level and most
// servers use; brotli's 4 with a 64 KiB window, a listing's whole body
// (quality 5 makes a listing 5 % smaller for about 1.5 to 2 times the
// CPU; 11, 17 % smaller for about 80 times); zstd's default.
const (
	gzipLevel     = gzip.DefaultCompression
	brotliQuality = 4
	brotliWindow  = 16
)

// Compressor compresses with pooled encoders. Build one with
// NewCompressor and share it.
type Compressor struct {
	gzip, brotli sync.Pool
	// zstd's EncodeAll is safe for concurrent use: it keeps a block
	// encoder per core.
	zstd *zstd.Encoder
}

// NewCompressor returns a Compressor.
func NewCompressor() (*Compressor, error) {
	z, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	if _, err := gzip.NewWriterLevel(nil, gzipLevel); err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	return &Compressor{
		gzip: sync.Pool{New: func() any {
			w, _ := gzip.NewWriterLevel(nil, gzipLevel) // the level was checked above
			return w
		}},
		brotli: sync.Pool{New: func() any {
			return brotli.NewWriterOptions(nil, brotli.WriterOptions{Quality: brotliQuality, LGWin: brotliWindow})
		}},
		zstd: z,
	}, nil
}

// Compress returns src compressed with c. It returns src itself for
// Identity.
func (z *Compressor) Compress(c Coding, src []byte) ([]byte, error) {
	switch c {
	case Identity:
		return src, nil
	case Zstd:
		return z.zstd.EncodeAll(src, make([]byte, 0, len(src)/2+64)), nil
	}
	var buf bytes.Buffer
	buf.Grow(len(src)/2 + 64)
	switch c {
	case Gzip:
		w := z.gzip.Get().(*gzip.Writer)
		defer z.gzip.Put(w)
		w.Reset(&buf)
		if _, err := w.Write(src); err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
	case Brotli:
		w := z.brotli.Get().(*brotli.Writer)
		defer z.brotli.Put(w)
		w.Reset(&buf)
		if _, err := w.Write(src); err != nil {
			return nil, fmt.Errorf("brotli: %w", err)
		}
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("brotli: %w", err)
		}
	default:
		return nil, fmt.Errorf("unknown coding %d", c)
	}
	return bytes.Clone(buf.Bytes()), nil
}
