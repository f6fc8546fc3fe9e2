package gatewaytest

import (
	"bytes"
	"compress/gzip"
	"strings"
)

// GzipBomb is a login body whose e-mail is size bytes long, gzipped rounds
// times ("Content-Encoding: gzip, gzip" for two): a few hundred bytes on
// the wire for 64 MiB inflated.
func GzipBomb(size, rounds int) []byte {
	b := []byte(`{"email":"` + strings.Repeat("a", size) + `","key":"k"}`)
	for range rounds {
		var out bytes.Buffer
		w, _ := gzip.NewWriterLevel(&out, gzip.BestCompression) // the level is valid
		w.Write(b)                                              // a bytes.Buffer does not fail
		w.Close()
		b = out.Bytes()
	}
	return b
}
