package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/realty-gateway/gateway/upstream"
)

// TestRevokedTokenIsRefused: a token that read a listing, remembered as
// verified, is refused once its user or its firm is revoked, with the
// answer an expired token gets, and counted as revoked; a token issued
// after the revocation, and another user's, go on.
func TestRevokedTokenIsRefused(t *testing.T) {
	tests := []struct {
		name   string
		revoke func(f fixture, at time.Time)
	}{
		{name: "the user", revoke: func(f fixture, at time.Time) {
			f.revoked.Add(upstream.Revocation{FirmID: 1, UserID: 1, At: at})
		}},
		{name: "the firm", revoke: func(f fixture, at time.Time) {
			f.revoked.Add(upstream.Revocation{FirmID: 1, At: at})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			obs := &countingObserver{}
			f.srv.obs = obs
			tok := "Bearer " + f.token(t)
			other := bearer(t, 2, 3) // firm 2's user
			if resp, body := f.get(t, "/realty/1", tok); resp.StatusCode != http.StatusOK {
				t.Fatalf("before the revocation: %d %s", resp.StatusCode, body)
			}
			tt.revoke(f, time.Now())

			expired := "Bearer " + sign(t, jwt.SigningMethodHS256, "k1",
				with(goodClaims(time.Now()), "exp", time.Now().Add(-time.Hour).Unix()), testSecret)
			wantResp, wantBody := f.get(t, "/realty/1", expired)
			// Remembered, then verified afresh: both paths check.
			for _, forget := range []bool{false, true} {
				if forget {
					f.srv.verified.InvalidateAll()
				}
				resp, body := f.get(t, "/realty/1", tok)
				requireSameAnswer(t, resp, body, wantResp, wantBody)
			}
			if got := obs.count(authRevoked); got != 2 {
				t.Fatalf("revoked refusals counted: %d; want 2", got)
			}
			if got := obs.count(authExpired); got != 1 {
				t.Fatalf("expired refusals counted: %d; want 1", got)
			}
			if resp, body := f.get(t, "/realty/1", other); resp.StatusCode != http.StatusOK {
				t.Fatalf("another firm's token: %d %s", resp.StatusCode, body)
			}
			// A login after the revocation works. Tokens carry their
			// issue time to the millisecond; wait out this one.
			time.Sleep(2 * time.Millisecond)
			if resp, body := f.get(t, "/realty/1", "Bearer "+f.token(t)); resp.StatusCode != http.StatusOK {
				t.Fatalf("a token issued after the revocation: %d %s", resp.StatusCode, body)
			}
		})
	}
}

// requireSameAnswer compares two refusals: status, the headers a client
// reads, and the body but for its requestId.
func requireSameAnswer(t *testing.T, got *http.Response, gotBody string, want *http.Response, wantBody string) {
	t.Helper()
	if got.StatusCode != http.StatusUnauthorized || want.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status %d, reference %d; want 401", got.StatusCode, want.StatusCode)
	}
	for _, h := range []string{"Content-Type", "WWW-Authenticate", "Cache-Control"} {
		if got.Header.Get(h) != want.Header.Get(h) {
			t.Fatalf("%s %q; an expired token gets %q", h, got.Header.Get(h), want.Header.Get(h))
		}
	}
	strip := func(b string) map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(b), &m); err != nil {
			t.Fatalf("body %q: %v", b, err)
		}
		delete(m, "requestId")
		return m
	}
	if g, w := fmt.Sprint(strip(gotBody)), fmt.Sprint(strip(wantBody)); g != w {
		t.Fatalf("body %s; an expired token gets %s", gotBody, wantBody)
	}
}

// TestRevocationBoundary: a revocation at T refuses tokens issued at or
// before T. A token's issue time is iatMs when it lies within iat's second;
// a token with iat alone (one-second resolution) counts from the start of
// its second, so one issued in T's second is refused, and one in a later
// second is not.
func TestRevocationBoundary(t *testing.T) {
	sec := time.Now().Unix() - 60 // a whole second, a minute ago
	revokedAt := sec*1000 + 400   // T: 400 ms into it
	claims := func(iat int64, iatMs any) jwt.MapClaims {
		c := with(goodClaims(time.Now()), "iat", iat)
		if iatMs != nil {
			c = with(c, "iatMs", iatMs)
		}
		return c
	}
	tests := []struct {
		name   string
		claims jwt.MapClaims
		want   int
	}{
		{name: "iat in an earlier second", claims: claims(sec-1, nil), want: 401},
		{name: "iat in T's second, no iatMs", claims: claims(sec, nil), want: 401},
		{name: "iat in the next second, no iatMs", claims: claims(sec+1, nil), want: 200},
		{name: "iatMs before T", claims: claims(sec, revokedAt-1), want: 401},
		{name: "iatMs at T", claims: claims(sec, revokedAt), want: 401},
		{name: "iatMs after T, same second", claims: claims(sec, revokedAt+1), want: 200},
		{name: "iatMs at the end of T's second", claims: claims(sec, sec*1000+999), want: 200},
		{name: "iatMs outside iat's second, later: iat counts", claims: claims(sec-1, revokedAt+1), want: 401},
		{name: "iatMs outside iat's second, earlier: iat counts", claims: claims(sec+1, revokedAt-1), want: 200},
		{name: "fractional iat in T's second, no iatMs", claims: claims(0, nil), want: 401}, // iat replaced below
	}
	f := newFixture(t)
	f.revoked.Add(upstream.Revocation{FirmID: 1, UserID: 1, At: time.UnixMilli(revokedAt)})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.claims
			if strings.HasPrefix(tt.name, "fractional") {
				c = with(c, "iat", float64(sec)+0.9)
			}
			resp, body := f.get(t, "/realty/1", "Bearer "+sign(t, jwt.SigningMethodHS256, "k1", c, testSecret))
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
		})
	}
}

// countingObserver counts refused tokens by reason.
type countingObserver struct {
	NoObserver
	mu      sync.Mutex
	refused map[string]int
}

func (o *countingObserver) AuthFailure(reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.refused == nil {
		o.refused = map[string]int{}
	}
	o.refused[reason]++
}

func (o *countingObserver) count(reason string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.refused[reason]
}
