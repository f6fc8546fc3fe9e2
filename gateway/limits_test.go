package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/ratelimit"
	"github.com/realty-gateway/gateway/upstream"
)

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

// TestAccountLimitCannotBeRaced sends 120 wrong passwords for one account
// at once from 120 addresses: only the limit's 20 may be judged.
func TestAccountLimitCannotBeRaced(t *testing.T) {
	limiters := map[string]func(t *testing.T) RateLimiter{
		"in process": func(*testing.T) RateLimiter { return nil },
		"redis": func(t *testing.T) RateLimiter {
			rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisOrStandIn(t), ContextTimeoutEnabled: true})
			prefix := testenv.RandomName("gwtest") + ":"
			t.Cleanup(func() {
				ctx := context.Background()
				_ = testenv.DeleteKeys(ctx, rdb, "rate:"+prefix+"*")
				rdb.Close()
			})
			l, err := ratelimit.New(rdb, prefix, time.Second, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
	}
	for name, limiter := range limiters {
		t.Run(name, func(t *testing.T) {
			f := newFixtureOf(t, fixtureOptions{limiter: limiter(t), change: func(c *Config) {
				trustAll(c)
				c.Login.AccountFailures, c.Login.LimitPeriod = 20, time.Hour
				// Twenty argon2id checks under -race may outlast the
				// fixture's request deadline: the limit is what is tested.
				c.Login.HashConcurrency, c.Login.HashWait, c.RequestTimeout = 4, time.Minute, time.Minute
			}})
			var wg sync.WaitGroup
			var mu sync.Mutex
			got := map[int]int{}
			for i := range 120 {
				wg.Go(func() {
					resp, _ := f.loginFrom(t, loginBody("pw@one.example", "wrong", testKey), fmt.Sprintf("198.51.100.%d", i))
					mu.Lock()
					got[resp.StatusCode]++
					mu.Unlock()
				})
			}
			wg.Wait()
			if got[401] > 20 || got[401] == 0 || got[401]+got[429] != 120 {
				t.Fatalf("statuses %v: want at most 20 judged (401), the rest 429", got)
			}
			if resp, _ := f.login(t, loginBody("pw@one.example", testPassword, testKey), nil); resp.StatusCode != 429 {
				t.Fatalf("the right password after the limit: %d, want 429", resp.StatusCode)
			}
		})
	}
}

// TestUnknownKeyBudget: past Login.UnknownKeyAttempts, logins with keys that
// have not resolved lately are 429 without a store lookup; a key that
// resolved before goes on.
func TestUnknownKeyBudget(t *testing.T) {
	var counted *countingAccounts
	f := newFixtureOf(t, fixtureOptions{
		change: func(c *Config) { c.Login.UnknownKeyAttempts, c.Login.LimitPeriod = 20, time.Hour },
		accounts: func(a Accounts) Accounts {
			counted = &countingAccounts{Accounts: a}
			return counted
		},
	})
	if resp, body := f.login(t, loginBody("pw@one.example", testPassword, testKey), nil); resp.StatusCode != 200 {
		t.Fatalf("first real login: %d %s", resp.StatusCode, body)
	}
	// The real login's lookup was given back: 20 unknown keys still fit.
	got := map[int]int{}
	for range 30 {
		resp, _ := f.login(t, loginBody("pw@one.example", "x", randomKey(t)), nil)
		got[resp.StatusCode]++
	}
	if got[401] != 20 || got[429] != 10 {
		t.Fatalf("statuses %v, want 20×401 then 10×429", got)
	}
	if n := counted.firmLookups.Load(); n != 21 {
		t.Fatalf("%d firm lookups, want 21: none past the budget", n)
	}
	if resp, body := f.login(t, loginBody("pw@one.example", testPassword, testKey), nil); resp.StatusCode != 200 {
		t.Fatalf("a key that resolved lately, during the flood: %d %s", resp.StatusCode, body)
	}
	if resp, _ := f.login(t, loginBody("pw@two.example", testPassword, otherKey), nil); resp.StatusCode != 429 {
		t.Fatalf("a key not seen lately, past the budget: %d, want 429", resp.StatusCode)
	}
}

// TestUnknownKeysDoNotStarveRealLogins floods logins with random keys from
// many addresses, with the production wait for a hashing slot and a slot
// for each real login, while real password logins go on: none of them may
// be refused, which only the flood taking slots could cause. (With fewer
// slots than real logins, a real one would wait for another's hash, whose
// time depends on the machine, not on the flood.)
func TestUnknownKeysDoNotStarveRealLogins(t *testing.T) {
	// Enough that a dummy hash per unknown key would hold the slots for
	// seconds; fewer than the 600 that once took 2.3 s on a loaded CI
	// machine (the race detector beside other packages' tests), where one
	// random key's login gave up with 503.
	const realLogins, flood = 5, 200
	f := newFixtureWith(t, func(c *Config) {
		trustAll(c)
		c.Login.HashConcurrency, c.Login.HashWait = realLogins, 250*time.Millisecond
	}, NoPurge{})
	var wg sync.WaitGroup
	type answer struct {
		status int
		body   string
	}
	answers := make(chan answer, flood)
	for i := range flood {
		wg.Go(func() {
			resp, body := f.loginFrom(t, loginBody("pw@one.example", "guess", randomKey(t)), fmt.Sprintf("198.51.%d.%d", i/250, i%250))
			answers <- answer{resp.StatusCode, body}
		})
	}
	var real []time.Duration
	var mu sync.Mutex
	began := time.Now()
	for i := range realLogins {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 5 * time.Millisecond)
			sent := time.Now()
			resp, body := f.loginFrom(t, loginBody("pw@one.example", testPassword, testKey), fmt.Sprintf("203.0.113.%d", i))
			mu.Lock()
			defer mu.Unlock()
			real = append(real, time.Since(sent).Round(time.Millisecond))
			if resp.StatusCode != 200 {
				t.Errorf("real login %d during the flood: status %d: %s", i, resp.StatusCode, body)
			}
		})
	}
	wg.Wait()
	t.Logf("%d random-key logins and %d real ones in %v; the real ones took %v", flood, realLogins, time.Since(began).Round(time.Millisecond), real)
	close(answers)
	for a := range answers {
		if a.status != http.StatusUnauthorized {
			t.Fatalf("a random key got %d, want 401: %s", a.status, a.body)
		}
	}
	if len(real) != 5 {
		t.Fatalf("%d real logins finished", len(real))
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

// countingAccounts counts firm lookups by API key.
type countingAccounts struct {
	Accounts
	firmLookups atomic.Int64
}

func (a *countingAccounts) FirmByKeyDigest(ctx context.Context, digest []byte) (upstream.Firm, error) {
	a.firmLookups.Add(1)
	return a.Accounts.FirmByKeyDigest(ctx, digest)
}

func randomKey(t testing.TB) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "rk_" + hex.EncodeToString(b)
}
