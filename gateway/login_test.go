package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

func (f fixture) login(t *testing.T, body string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/auth/login", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "test")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return f.do(t, req)
}

func loginBody(email, password, key string) string {
	return fmt.Sprintf(`{"email":%q,"password":%q,"key":%q}`, email, password, key)
}

func TestLoginLimits(t *testing.T) {
	tests := []struct {
		name  string
		give  func(*Login)
		tries []string // bodies, in order
		want  []int    // statuses, in order
	}{
		{
			name:  "failed logins per account",
			give:  func(l *Login) { l.AccountFailures, l.LimitPeriod = 2, time.Hour },
			tries: []string{loginBody("pw@one.example", "wrong", testKey), loginBody("PW@one.example ", "wrong", testKey), loginBody("pw@one.example", testPassword, testKey)},
			want:  []int{401, 401, 429},
		},
		{
			name: "failures without the firm's key do not lock the account",
			give: func(l *Login) { l.AccountFailures, l.LimitPeriod = 2, time.Hour },
			tries: []string{loginBody("pw@one.example", "wrong", "not-a-key"), loginBody("pw@one.example", "wrong", "not-a-key"),
				loginBody("pw@one.example", "wrong", "not-a-key"), loginBody("pw@one.example", testPassword, testKey)},
			want: []int{401, 401, 401, 200},
		},
		{
			name:  "successes do not count against the account",
			give:  func(l *Login) { l.AccountFailures, l.LimitPeriod = 1, time.Hour },
			tries: []string{loginBody("pw@one.example", testPassword, testKey), loginBody("pw@one.example", testPassword, testKey), loginBody("pw@one.example", testPassword, testKey)},
			want:  []int{200, 200, 200},
		},
		{
			name:  "attempts per client IP",
			give:  func(l *Login) { l.IPAttempts, l.LimitPeriod = 2, time.Hour },
			tries: []string{loginBody("pw@one.example", testPassword, testKey), loginBody("otp@one.example", "", testKey), loginBody("pw@two.example", testPassword, otherKey)},
			want:  []int{200, 200, 429},
		},
		{
			name:  "attempts per API key",
			give:  func(l *Login) { l.KeyAttempts, l.LimitPeriod = 2, time.Hour },
			tries: []string{loginBody("pw@one.example", testPassword, testKey), loginBody("otp@one.example", "", testKey), loginBody("otp@one.example", "", testKey), loginBody("pw@two.example", testPassword, otherKey)},
			want:  []int{200, 200, 429, 200},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixtureWith(t, func(c *Config) { tt.give(&c.Login) }, NoPurge{})
			for i, body := range tt.tries {
				resp, got := f.login(t, body, nil)
				if resp.StatusCode != tt.want[i] {
					t.Fatalf("try %d: status %d, want %d: %s", i, resp.StatusCode, tt.want[i], got)
				}
				if resp.StatusCode == 429 {
					secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
					if err != nil || secs < 1 || resp.Header.Get("Content-Type") != "application/problem+json" {
						t.Fatalf("429 Retry-After %q, Content-Type %q", resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"))
					}
				}
			}
		})
	}
}

func TestClientIPComesFromForwardedForOnlyBehindTrustedProxies(t *testing.T) {
	limit := func(c *Config) { c.Login.IPAttempts, c.Login.LimitPeriod = 1, time.Hour }
	tests := []struct {
		name    string
		trusted []string
		give    []string // X-Forwarded-For of consecutive logins
		want    []int
	}{
		{name: "untrusted peer: the header is ignored", give: []string{"10.0.0.1", "10.0.0.2"}, want: []int{200, 429}},
		{name: "trusted peer: each client counts on its own", trusted: []string{"0.0.0.0/8"},
			give: []string{"10.0.0.1", "10.0.0.2", "10.0.0.1"}, want: []int{200, 200, 429}},
		{name: "spoofed left-most hops do not help", trusted: []string{"0.0.0.0/8"},
			give: []string{"1.1.1.1, 10.0.0.9", "2.2.2.2, 10.0.0.9"}, want: []int{200, 429}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixtureWith(t, func(c *Config) { limit(c); c.TrustedProxies = tt.trusted }, NoPurge{})
			for i, xff := range tt.give {
				resp, body := f.login(t, loginBody("otp@one.example", "", testKey), map[string]string{"X-Forwarded-For": xff})
				if resp.StatusCode != tt.want[i] {
					t.Fatalf("login %d (X-Forwarded-For %s): status %d, want %d: %s", i, xff, resp.StatusCode, tt.want[i], body)
				}
			}
		})
	}
}

func TestLongPasswordRejectedBeforeHashing(t *testing.T) {
	f := newFixture(t)
	resp, body := f.login(t, loginBody("pw@one.example", strings.Repeat("p", 1025), testKey), nil)
	if resp.StatusCode != 400 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
}

func TestHashingAtCapacityAnswers503(t *testing.T) {
	f := newFixtureWith(t, func(c *Config) { c.Login.HashConcurrency = 1; c.Login.HashWait = 10 * time.Millisecond }, NoPurge{})
	// Hold the only slot, as a long-running hash would.
	if !f.srv.hashing.TryAcquire(1) {
		t.Fatal("slot taken")
	}
	defer f.srv.hashing.Release(1)
	resp, body := f.login(t, loginBody("pw@one.example", testPassword, testKey), nil)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}
