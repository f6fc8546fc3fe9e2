package faults

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/internal/gatewaytest"
)

const (
	// bombSize is what each compression bomb would inflate to (about
	// 400 bytes on the wire).
	bombSize = 256 << 20
	// rssGrowthLimit is how much the gateway's RSS may grow over the
	// phase: three quarters of one inflated bomb, where inflating would
	// take at least one bomb per attacker. The rate alone grows it: the
	// key flood without bombs took it up by 57 MiB, with some 14,000
	// bombs a second by 66 to 91 MiB; the heap in use after 20,000 bombs
	// in process stayed at 1.5 MiB.
	rssGrowthLimit = 192 << 20
)

// abuse runs the normal load while two attackers send compression bombs
// (256 MiB JSON, gzipped twice, to every route that takes a body) and four
// flood logins with random API keys. The normal load must stay right, the
// bombs must be refused with 415, the junk logins with 401 or 429, and the
// gateway's RSS must stay flat.
func (s *suite) abuse(t *testing.T, res *phaseResult) {
	w := s.w
	bomb := gatewaytest.GzipBomb(bombSize, 2)
	baseline, err := w.p.RSS()
	if err != nil {
		t.Fatalf("RSS: %v", err)
	}
	var peak atomic.Int64
	var mu sync.Mutex
	bombs, junk := map[int]int{}, map[int]int{}
	count := func(m map[int]int, status int) {
		if status == 0 {
			return // cut off by the end of the phase
		}
		mu.Lock()
		m[status]++
		mu.Unlock()
	}
	w.runLoad(t, res, 4*time.Second, func(ctx context.Context, _ context.CancelFunc) {
		var wg sync.WaitGroup
		wg.Go(func() {
			for ctx.Err() == nil {
				if rss, err := w.p.RSS(); err == nil && rss > peak.Load() {
					peak.Store(rss)
				}
				sleep(ctx, 20*time.Millisecond)
			}
		})
		paths := []struct{ method, path string }{{http.MethodPost, "/auth/login"}, {http.MethodPost, "/realty"}, {http.MethodPut, "/realty/5001"}}
		for i := range 2 {
			wg.Go(func() {
				for n := i; ctx.Err() == nil; n++ {
					p := paths[n%len(paths)]
					count(bombs, w.abusive(ctx, p.method, p.path, bomb, "gzip, gzip"))
				}
			})
		}
		for range 4 {
			wg.Go(func() {
				for ctx.Err() == nil {
					key := make([]byte, 32)
					rand.Read(key)
					body := fmt.Sprintf(`{"email":"agent@faults.example","password":"guess","key":"rk_%s"}`, hex.EncodeToString(key))
					count(junk, w.abusive(ctx, http.MethodPost, "/auth/login", []byte(body), ""))
				}
			})
		}
		wg.Wait()
	})
	grew := peak.Load() - baseline
	res.note("bombs %v, random-key logins %v; RSS %d MiB before, peak +%d MiB", bombs, junk, baseline>>20, grew>>20)
	for status, n := range bombs {
		if status != http.StatusUnsupportedMediaType {
			t.Errorf("%d bombs answered %d, want 415", n, status)
		}
	}
	for status, n := range junk {
		if status != http.StatusUnauthorized && status != http.StatusTooManyRequests {
			t.Errorf("%d random-key logins answered %d, want 401 or 429", n, status)
		}
	}
	if bombs[http.StatusUnsupportedMediaType] == 0 || junk[http.StatusUnauthorized] == 0 {
		t.Errorf("the attack did not run: bombs %v, random-key logins %v", bombs, junk)
	}
	if grew > rssGrowthLimit {
		t.Errorf("RSS grew by %d MiB under the bombs, want at most %d", grew>>20, rssGrowthLimit>>20)
	}
}

// abusive sends one attacker's request and returns its status, or 0 when
// it got no answer (the phase ended).
func (w *world) abusive(ctx context.Context, method, path string, body []byte, encoding string) int {
	req, _ := http.NewRequestWithContext(ctx, method, w.p.Base+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "fault-suite-attacker")
	req.Header.Set("Authorization", "Bearer "+w.token)
	if encoding != "" {
		req.Header.Set("Content-Encoding", encoding)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
