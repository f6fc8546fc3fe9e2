package e2e

// End-to-end tests of compressed listings across replicas.

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

	"github.com/realty-gateway/gateway/internal/testenv"
)

// decode returns body without its Content-Encoding ce. It reports a body
// that does not decode as a test error, for goroutines.
func decode(t *testing.T, ce string, body []byte) []byte {
	var r io.Reader
	switch ce {
	case "":
		return body
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Errorf("gzip body: %v", err)
			return nil
		}
		r = zr
	case "br":
		r = brotli.NewReader(bytes.NewReader(body))
	case "zstd":
		zr, err := zstd.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Errorf("zstd body: %v", err)
			return nil
		}
		defer zr.Close()
		r = zr
	default:
		t.Errorf("Content-Encoding %q", ce)
		return nil
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Errorf("%s body: %v", ce, err)
	}
	return b
}

// TestEndToEndReplicasAgreeOnCodings: two gateways that share no cache
// (their own Redis prefixes) each compress the same version themselves,
// and send the same bytes under the same tag in every coding, so that a
// CDN revalidating against the other replica gets its 304.
func TestEndToEndReplicasAgreeOnCodings(t *testing.T) {
	pgURL, redisAddr := testenv.PostgresURL(t), testenv.RedisAddr(t)
	e, _ := postgresEnv(t, pgURL, redisAddr)
	w := newWorld(t, e)
	e2, _ := postgresEnv(t, pgURL, redisAddr)
	e2["GATEWAY_STORE_URL"] = e["GATEWAY_STORE_URL"] // the same store, another Redis prefix
	a, b := start(t, e), start(t, e2)
	tok := a.token(t, w.otpLogin())
	get := func(p *process, ae, ifNoneMatch string) response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, p.Base+"/realty/1001", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Accept-Encoding", ae)
		if ifNoneMatch != "" {
			req.Header.Set("If-None-Match", ifNoneMatch)
		}
		return doRaw(t, req)
	}
	identity := get(a, "identity", "")
	for _, ae := range []string{"gzip", "br", "zstd"} {
		fromA, fromB := get(a, ae, ""), get(b, ae, "")
		if fromA.status != 200 || fromB.status != 200 || fromA.header.Get("Content-Encoding") != ae {
			t.Fatalf("%s: %d and %d, Content-Encoding %q", ae, fromA.status, fromB.status, fromA.header.Get("Content-Encoding"))
		}
		if fromA.header.Get("ETag") != fromB.header.Get("ETag") || !bytes.Equal(fromA.body, fromB.body) {
			t.Fatalf("%s: replica A sent %s (%d bytes), B %s (%d bytes)", ae, fromA.header.Get("ETag"), len(fromA.body),
				fromB.header.Get("ETag"), len(fromB.body))
		}
		if !bytes.Equal(decode(t, ae, fromB.body), identity.body) {
			t.Fatalf("%s: does not decode to the identity body", ae)
		}
		if r := get(b, ae, fromA.header.Get("ETag")); r.status != http.StatusNotModified {
			t.Fatalf("%s: revalidating A's tag against B: %d, want 304", ae, r.status)
		}
	}
}
