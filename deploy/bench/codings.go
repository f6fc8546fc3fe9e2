package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// chromeAcceptEncoding is what Chrome sends.
const chromeAcceptEncoding = "gzip, deflate, br, zstd"

// codingCases are -codings' pairs: each gateway case read as identity and
// with Chrome's Accept-Encoding, interleaved: the hot hit (gateway-local,
// Redis configured, and gateway-embedded) and the store miss in the
// production shape (gateway-miss-redis), where the chrome case pays the
// compression (gzip) of each version it loads.
var codingCases = [][2]string{
	{"gateway-local", "gateway-local-chrome"},
	{"gateway-embedded", "gateway-embedded-chrome"},
	{"gateway-miss-redis", "gateway-miss-redis-chrome"},
}

// startCodings starts the gateways of -codings alone, and for each its
// second face: the same process, read with Chrome's Accept-Encoding (a
// walk of its own, half the listings further on).
func (l *lab) startCodings(ctx context.Context) error {
	if _, err := l.startGateway(ctx, "gateway-miss-redis", false, l.prefix+"miss:"); err != nil {
		return err
	}
	l.servers["gateway-miss-redis"].script = "walk.lua"
	if _, err := l.startGateway(ctx, "gateway-local", false, ""); err != nil {
		return err
	}
	if _, err := l.startGateway(ctx, "gateway-embedded", false, "", "GATEWAY_STORE_URL=sqlite:"+l.work+"/embedded.db",
		"GATEWAY_REDIS_URL="); err != nil {
		return err
	}
	for _, pair := range codingCases {
		base := l.servers[pair[0]]
		chrome := *base
		chrome.name = pair[1]
		chrome.headers = []string{"Accept-Encoding: " + chromeAcceptEncoding}
		chrome.next = base.next + l.opts.listings/2
		l.servers[pair[1]] = &chrome
	}
	return l.login()
}

// codingsBench measures what compression costs and saves: each pair of
// codingCases interleaved, -reps times; the bytes each response puts on
// the wire; and the memory a listing's variants take in Redis.
func (l *lab) codingsBench(ctx context.Context, w *strings.Builder) error {
	var names []string
	for _, pair := range codingCases {
		names = append(names, pair[0], pair[1])
	}
	if err := l.warmUp(ctx, names, false); err != nil {
		return err
	}
	res, err := l.rounds(ctx, l.opts.reps, false, names)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n## Compressed listings: identity against Chrome's `Accept-Encoding: %s`, wrk -t2 -c%d -d%v, %d interleaved repetitions, medians\n\n",
		chromeAcceptEncoding, l.opts.conns, l.opts.duration, l.opts.reps)
	w.WriteString("| case | requests/s | bytes per response | gateway CPU per request | chrome / identity: requests/s | bytes | CPU |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, pair := range codingCases {
		id, ch := median(res[pair[0]]), median(res[pair[1]])
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %s | | | |\n", pair[0], id.rps, id.bytesPerResponse(), us(id.cpuPerRequest))
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %s | **%.3f×** | **%.3f×** | %.3f× |\n", pair[1], ch.rps, ch.bytesPerResponse(),
			us(ch.cpuPerRequest), ch.rps/id.rps, ch.bytesPerResponse()/id.bytesPerResponse(),
			float64(ch.cpuPerRequest)/float64(id.cpuPerRequest))
	}
	for _, pair := range codingCases {
		fmt.Fprintf(w, "\n%s, each repetition's chrome / identity requests/s:", pair[0])
		for i := range min(len(res[pair[0]]), len(res[pair[1]])) {
			fmt.Fprintf(w, " %.3f", res[pair[1]][i].rps/res[pair[0]][i].rps)
		}
	}
	miss, missChrome := median(res["gateway-miss-redis"]), median(res["gateway-miss-redis-chrome"])
	fmt.Fprintf(w, "\n\nThe compression a miss adds (gateway-miss-redis, one gzip per version loaded, Chrome's choice): %s of gateway CPU per miss "+
		"(%s against %s).\n", us(missChrome.cpuPerRequest-miss.cpuPerRequest), us(missChrome.cpuPerRequest), us(miss.cpuPerRequest))
	return l.variantMemory(ctx, w)
}

// bytesPerResponse is what wrk read per response: status line, headers
// and body.
func (r result) bytesPerResponse() float64 {
	if r.requests == 0 {
		return 0
	}
	return float64(r.bytes) / float64(r.requests)
}

// variantMemory reads the hot listing in each coding from gateway-local,
// so that its records carry every variant, and reports what a key takes
// in Redis before and after (MEMORY USAGE), with the size of each coding.
func (l *lab) variantMemory(ctx context.Context, w *strings.Builder) error {
	s := l.servers["gateway-local"]
	rdb := redis.NewClient(&redis.Options{Addr: l.redisAddr})
	defer rdb.Close()
	// A listing no case read: its records hold no variant yet.
	const id = 7
	key := fmt.Sprintf("%srealty:id:%d", s.prefix, id)
	sizes := map[string]int{}
	get := func(ae string) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/realty/%d", s.addr, id), nil)
		req.Header.Set("Authorization", "Bearer "+l.token)
		req.Header.Set("Accept-Encoding", ae)
		resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		sizes[ae] = len(b)
		return err
	}
	if err := get("identity"); err != nil {
		return err
	}
	before, err := rdb.MemoryUsage(ctx, key).Result()
	if err != nil {
		return fmt.Errorf("MEMORY USAGE %s: %w", key, err)
	}
	for _, ae := range []string{"br", "gzip", "zstd"} {
		if err := get(ae); err != nil {
			return err
		}
	}
	var after int64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if after, err = rdb.MemoryUsage(ctx, key).Result(); err == nil && after > before+int64(sizes["zstd"]) {
			break
		}
	}
	log.Printf("listing %d: %v bytes by coding; Redis key %d then %d bytes", id, sizes, before, after)
	fmt.Fprintf(w, "\nMemory per cached listing (listing %d; identity %d bytes, br %d, gzip %d, zstd %d):\n\n"+
		"- Redis, per key (a listing has two): %d bytes with the identity body, %d with every coding's variant (%.2f×); "+
		"variants are added only for the codings requested.\n"+
		"- In process, per entry: the identity record plus each variant made, rounded to the allocator's size class "+
		"(`cache/variants.go`; the weighers count it, `TestVariantsAreWeighed`): about %d bytes more with all three.\n",
		id, sizes["identity"], sizes["br"], sizes["gzip"], sizes["zstd"], before, after, float64(after)/float64(before),
		sizes["br"]+sizes["gzip"]+sizes["zstd"]+3*32)
	return nil
}
