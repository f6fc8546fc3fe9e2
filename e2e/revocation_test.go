package e2e

// End-to-end tests of token revocation: two gateway processes sharing
// Redis and a fresh PostgreSQL database, revocations written by the CLI as
// an operator runs it (and, for the latency measurement, as the CLI writes
// them, without its process start).

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/faultproxy"
	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/revocation"
	"github.com/realty-gateway/gateway/upstream/postgres"
)

// revocationPoll is how often the fleet's gateways read the revocations
// from the store, unless a test sets another: an hour, far beyond the
// tests' patience, so that while Redis is up only the announcement can
// make a replica refuse a revoked token within it. The issue's
// requirement (every replica within a second) is a figure that
// TestEndToEndRevocationLatency logs, not a bound a test asserts
// (docs/testing.md).
const revocationPoll = time.Hour

// fleet is two gateways sharing the store and Redis, over newWorld.
type fleet struct {
	w      world
	e      environment
	prefix string
	ps     []*process
}

// newFleet starts two gateways on a fresh database and Redis prefix, with
// change applied to their environment first, and waits until both are
// subscribed to the revocation announcements (when Redis is up).
func newFleet(t *testing.T, change func(environment)) fleet {
	t.Helper()
	e, prefix := postgresEnv(t, testenv.PostgresURL(t), testenv.RedisAddr(t))
	e["GATEWAY_LOGIN_IP_ATTEMPTS"] = "100000"
	e["GATEWAY_LOGIN_KEY_ATTEMPTS"] = "100000"
	e["GATEWAY_REVOCATION_POLL"] = revocationPoll.String()
	testenv.NeedPatienceBelow(t, revocationPoll, "the fleet's revocation poll")
	if change != nil {
		change(e)
	}
	f := fleet{w: newWorld(t, e), e: e, prefix: prefix}
	f.ps = []*process{start(t, e), start(t, e)}
	for _, p := range f.ps {
		testenv.WaitFor(t, func() bool { s, err := p.ReadStats(); return err == nil && s.Revocations.Subscribed })
	}
	return f
}

// readsEverywhere fails unless tok reads a listing on every gateway, twice,
// so that each remembers it as verified.
func (f fleet) readsEverywhere(t *testing.T, what, tok string) {
	t.Helper()
	for i, p := range f.ps {
		for range 2 {
			if r := p.view(t, "/realty/1001", tok); r.status != http.StatusOK {
				t.Fatalf("%s on replica %d: %d %s; want 200", what, i+1, r.status, r.body)
			}
		}
	}
}

// usersReading logs in the password user on the first gateway and the
// passwordless user on the second, and returns their tokens once each
// reads on every gateway.
func (f fleet) usersReading(t *testing.T) (user, other string) {
	t.Helper()
	user = f.ps[0].token(t, f.w.passwordLogin())
	other = f.ps[1].token(t, f.w.otpLogin())
	f.readsEverywhere(t, "the user's token", user)
	f.readsEverywhere(t, "the other user's token", other)
	return user, other
}

// refusedEverywhere polls every gateway with tok until each answers 401,
// and returns how long after since the last one did; it fails the test
// when one still answers otherwise after limit (testenv.Patience, or a
// product bound plus it).
func (f fleet) refusedEverywhere(t *testing.T, what, tok string, since time.Time, limit time.Duration) time.Duration {
	t.Helper()
	type result struct {
		replica int
		after   time.Duration // -1: not within limit
		status  int           // the last one seen
	}
	results := make(chan result, len(f.ps))
	for i, p := range f.ps {
		go func() {
			client := &http.Client{Timeout: 2 * time.Second}
			last := 0
			for {
				req, _ := http.NewRequest(http.MethodGet, p.Base+"/realty/1001", nil)
				req.Header.Set("Authorization", "Bearer "+tok)
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if last = resp.StatusCode; last == http.StatusUnauthorized {
						results <- result{replica: i + 1, after: time.Since(since)}
						return
					}
				}
				if time.Since(since) > limit {
					results <- result{replica: i + 1, after: -1, status: last}
					return
				}
				time.Sleep(500 * time.Microsecond)
			}
		}()
	}
	var slowest time.Duration
	for range f.ps {
		r := <-results
		if r.after < 0 {
			t.Fatalf("%s: replica %d still answers %d after %v; want 401 within it", what, r.replica, r.status, limit)
		}
		slowest = max(slowest, r.after)
	}
	return slowest
}

// issued reads a token's payload, unverified: iat, iatMs and the user.
type issuedClaims struct {
	IAT        int64 `json:"iat"`
	IATMs      int64 `json:"iatMs"`
	FirmUserID int64 `json:"firmUserId"`
}

func issued(t *testing.T, tok string) issuedClaims {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("token %q is not a JWS", tok)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	var c issuedClaims
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil {
		t.Fatalf("token payload: %v", err)
	}
	return c
}

// signed makes a token as the gateways sign it, with these claims over
// the usual ones (nil removes one).
func signed(t *testing.T, firmID, userID int64, over map[string]any) string {
	t.Helper()
	now := time.Now()
	c := jwt.MapClaims{
		"iss": "realty-gateway", "aud": []string{"realty-api"}, "sub": strconv.FormatInt(userID, 10),
		"firmId": firmID, "firmUserId": userID, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "jti": "e2e",
	}
	for k, v := range over {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
	tok.Header["kid"] = "default"
	s, err := tok.SignedString([]byte(e2eSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEndToEndRevocationUserDisable (issue 16, item 1): a user's token reads
// on both replicas, each of which remembers it as verified; user disable
// runs, and within a second both answer 401 to it, exactly as to an expired
// token, counted as revoked. The firm's other user goes on; user enable
// lets the user log in again without bringing the old token back.
func TestEndToEndRevocationUserDisable(t *testing.T) {
	f := newFleet(t, nil)
	tok, otp := f.usersReading(t)

	began := time.Now()
	out := admin(t, f.e, "", "user", "disable", "--firm", fmt.Sprint(f.w.firm), "--email", "agent@acme.example")
	returned := time.Now()
	if out["disabled"] != true || out["announced"] != true || out["revokedAt"] == nil || out["firmUserId"] != float64(f.w.pwUser) {
		t.Fatalf("user disable printed %v; want the user disabled, its tokens revoked and announced", out)
	}
	after := f.refusedEverywhere(t, "the disabled user's token", tok, returned, testenv.Patience())
	t.Logf("user disable: the command took %v; both replicas refused the token %v after it returned",
		returned.Sub(began).Round(time.Millisecond), after.Round(100*time.Microsecond))

	expired := signed(t, f.w.firm, f.w.pwUser, map[string]any{"iat": time.Now().Add(-2 * time.Hour).Unix(), "exp": time.Now().Add(-time.Hour).Unix()})
	for _, p := range f.ps {
		requireSameRejection(t, "the revoked token", p.view(t, "/realty/1001", tok), p.view(t, "/realty/1001", expired))
		n, ok := p.metric(t, `gateway_auth_failures_total{reason="revoked"}`)
		if !ok {
			t.Fatal(`no series gateway_auth_failures_total{reason="revoked"} on /metrics`)
		}
		if n < 1 {
			t.Fatalf("gateway_auth_failures_total{reason=\"revoked\"} = %v; want the refusals counted", n)
		}
	}
	f.readsEverywhere(t, "the other user's token", otp)
	if r := f.ps[0].login(t, f.w.passwordLogin()); r.status != http.StatusUnauthorized {
		t.Fatalf("the disabled user's login: %d", r.status)
	}

	out = admin(t, f.e, "", "user", "enable", "--firm", fmt.Sprint(f.w.firm), "--email", "Agent@acme.example")
	if out["enabled"] != true || out["firmUserId"] != float64(f.w.pwUser) {
		t.Fatalf("user enable printed %v", out)
	}
	fresh := f.ps[1].token(t, f.w.passwordLogin())
	f.readsEverywhere(t, "a token issued after user enable", fresh)
	for i, p := range f.ps {
		if r := p.view(t, "/realty/1001", tok); r.status != http.StatusUnauthorized {
			t.Fatalf("the token revoked by user disable, after user enable, on replica %d: %d; want 401", i+1, r.status)
		}
	}
}

// TestEndToEndRevocationRotateKey (item 2): firm rotate-key revokes the
// tokens of every user of the firm on both replicas within a second, and
// the other firm's go on; with --keep-tokens, the tokens keep working.
func TestEndToEndRevocationRotateKey(t *testing.T) {
	f := newFleet(t, nil)
	agent := f.ps[0].token(t, f.w.passwordLogin())
	otp := f.ps[1].token(t, f.w.otpLogin())
	otherLogin := f.w.otherLogin()
	other := f.ps[0].token(t, otherLogin)
	for _, tok := range []string{agent, otp, other} {
		f.readsEverywhere(t, "a token before the rotation", tok)
	}

	out := admin(t, f.e, "", "firm", "rotate-key", "--firm", fmt.Sprint(f.w.firm))
	returned := time.Now()
	newKey, _ := out["apiKey"].(string)
	if !strings.HasPrefix(newKey, "rk_") || out["announced"] != true || out["revokedAt"] == nil {
		t.Fatalf("firm rotate-key printed %v; want a new key and the firm's tokens revoked and announced", out)
	}
	for _, tok := range []string{agent, otp} {
		after := f.refusedEverywhere(t, "a token of the rotated firm", tok, returned, testenv.Patience())
		t.Logf("firm rotate-key: both replicas refused a user's token %v after the command returned", after.Round(100*time.Microsecond))
	}
	f.readsEverywhere(t, "the other firm's token", other)

	login := func(email, key string) string {
		if email == "agent@acme.example" {
			return fmt.Sprintf(`{"email":%q,"password":%q,"key":%q}`, email, f.w.password, key)
		}
		return fmt.Sprintf(`{"email":%q,"key":%q}`, email, key)
	}
	agent2 := f.ps[1].token(t, login("agent@acme.example", newKey))
	otp2 := f.ps[0].token(t, login("otp@acme.example", newKey))
	f.readsEverywhere(t, "a token of the new key", agent2)
	f.readsEverywhere(t, "a token of the new key", otp2)

	out = admin(t, f.e, "", "firm", "rotate-key", "--firm", fmt.Sprint(f.w.firm), "--keep-tokens")
	newest, _ := out["apiKey"].(string)
	if out["tokensKept"] != true || out["revokedAt"] != nil || !strings.HasPrefix(newest, "rk_") {
		t.Fatalf("firm rotate-key --keep-tokens printed %v; want a new key and no revocation", out)
	}
	// A revocation announced after it, of the other firm, reaching both
	// replicas shows that they applied everything announced before.
	admin(t, f.e, "", "token", "revoke", "--firm", fmt.Sprint(f.w.firm2))
	f.refusedEverywhere(t, "the other firm's token", other, time.Now(), testenv.Patience())
	f.readsEverywhere(t, "a token kept by --keep-tokens", agent2)
	f.readsEverywhere(t, "a token kept by --keep-tokens", otp2)
	if r := f.ps[0].login(t, login("otp@acme.example", newKey)); r.status != http.StatusUnauthorized {
		t.Fatalf("login with the replaced key: %d", r.status)
	}
	f.ps[1].token(t, login("otp@acme.example", newest))
}

// TestEndToEndTokenRevokeOneUser (item 3): token revoke --firm N --email E
// revokes that user's tokens alone, on both replicas, and a new login
// afterwards works.
func TestEndToEndTokenRevokeOneUser(t *testing.T) {
	f := newFleet(t, nil)
	agent, otp := f.usersReading(t)

	out := admin(t, f.e, "", "token", "revoke", "--firm", fmt.Sprint(f.w.firm), "--email", " Agent@ACME.example")
	returned := time.Now()
	if out["firmId"] != float64(f.w.firm) || out["announced"] != true || out["revokedAt"] == nil {
		t.Fatalf("token revoke printed %v", out)
	}
	after := f.refusedEverywhere(t, "the revoked user's token", agent, returned, testenv.Patience())
	t.Logf("token revoke: both replicas refused the token %v after the command returned", after.Round(100*time.Microsecond))
	f.readsEverywhere(t, "the other user's token", otp)
	fresh := f.ps[1].token(t, f.w.passwordLogin())
	f.readsEverywhere(t, "a token of a login after the revocation", fresh)
}

// TestEndToEndRevocationWithRedisDown (item 4): with Redis stopped, the
// CLI records the revocation in the store but cannot announce it, and both
// replicas read it from the store within GATEWAY_REVOCATION_POLL (the
// default, 2 s), plus one store read. When Redis is back, announcements
// flow again.
func TestEndToEndRevocationWithRedisDown(t *testing.T) {
	var redisProxy *faultproxy.Proxy
	poll := revocation.DefaultConfig().Poll
	f := newFleet(t, func(e environment) {
		redisProxy = faultproxy.New(t, testenv.RedisAddr(t))
		e["GATEWAY_REDIS_URL"] = "redis://" + redisProxy.Addr() + "/0"
		e["GATEWAY_REVOCATION_POLL"] = poll.String()
	})
	tok := f.ps[0].token(t, f.w.passwordLogin())
	f.readsEverywhere(t, "the user's token", tok)

	redisProxy.Stop()
	code, stdout, stderr := gatewayCmdStderr(t, f.e, "", "token", "revoke", "--firm", fmt.Sprint(f.w.firm), "--email", "agent@acme.example")
	returned := time.Now()
	var out map[string]any
	if code != 0 || json.Unmarshal([]byte(stdout), &out) != nil || out["announced"] != false || out["revokedAt"] == nil {
		t.Fatalf("token revoke with Redis down exited %d, printed %q; want the revocation recorded, not announced\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "not announced") {
		t.Fatalf("token revoke with Redis down did not warn:\n%s", stderr)
	}
	after := f.refusedEverywhere(t, "the token revoked with Redis down", tok, returned, poll+testenv.Patience())
	t.Logf("Redis down: both replicas refused the token %v after the command returned (GATEWAY_REVOCATION_POLL %v)",
		after.Round(time.Millisecond), poll)

	if err := redisProxy.Restart(); err != nil {
		t.Fatal(err)
	}
	for _, p := range f.ps {
		testenv.WaitFor(t, func() bool { s, err := p.ReadStats(); return err == nil && s.Revocations.Subscribed })
	}
	otp := f.ps[1].token(t, f.w.otpLogin())
	f.readsEverywhere(t, "the other user's token", otp)
	out = admin(t, f.e, "", "token", "revoke", "--firm", fmt.Sprint(f.w.firm), "--email", "otp@acme.example")
	if out["announced"] != true {
		t.Fatalf("token revoke after Redis came back printed %v; want it announced", out)
	}
	f.refusedEverywhere(t, "a token revoked after Redis came back", otp, time.Now(), testenv.Patience())
}

// TestEndToEndRevocationBeforeStart (item 5): a gateway started after a
// revocation refuses the token from its first request, and prunes the
// store's revocations older than the token lifetime plus the leeway.
func TestEndToEndRevocationBeforeStart(t *testing.T) {
	f := newFleet(t, nil)
	tok := f.ps[0].token(t, f.w.passwordLogin())
	f.readsEverywhere(t, "the user's token", tok)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, f.e["GATEWAY_STORE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// A revocation of the other firm from 2 h ago: with a 1 h lifetime and
	// 30 s of leeway, every token it names has expired.
	expired := time.Now().Add(-2 * time.Hour).UnixMilli()
	if _, err := conn.Exec(ctx, `INSERT INTO token_revocations (firm_id, firm_user_id, revoked_at) VALUES ($1, 0, $2)`, f.w.firm2, expired); err != nil {
		t.Fatal(err)
	}
	admin(t, f.e, "", "token", "revoke", "--firm", fmt.Sprint(f.w.firm), "--email", "agent@acme.example")

	late := start(t, f.e)
	if r := late.view(t, "/realty/1001", tok); r.status != http.StatusUnauthorized {
		t.Fatalf("the first request with the revoked token to a gateway started after the revocation: %d; want 401", r.status)
	}
	if s := late.Stats(t).Revocations; s.InForce != 1 {
		t.Fatalf("the late gateway holds %d revocations; want 1 (the expired one pruned)", s.InForce)
	}
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM token_revocations WHERE firm_id = $1`, f.w.firm2).Scan(&left); err != nil || left != 0 {
		t.Fatalf("expired revocations left in the store: %d, %v; want them pruned", left, err)
	}
	fresh := late.token(t, f.w.passwordLogin())
	if r := late.view(t, "/realty/1001", fresh); r.status != http.StatusOK {
		t.Fatalf("a token issued after the revocation, on the late gateway: %d", r.status)
	}
}

// TestEndToEndRevocationSameSecond (item 6): tokens issued after a
// revocation work, including one issued in the same second, and one
// issued before it in that second does not. Tokens carry iatMs, so the
// comparison is to the millisecond; a token with the standard one-second
// iat alone counts from the start of its second: in the revocation's
// second it is refused, in the next it is not.
func TestEndToEndRevocationSameSecond(t *testing.T) {
	f := newFleet(t, nil)
	// Each attempt needs a login, the command and a login within one
	// second; a busy machine may need many attempts.
	budget := 3 * testenv.Patience()
	began := time.Now()
	for attempt := 1; time.Since(began) < budget; attempt++ {
		// Begin just after a second starts, so that a login, the
		// revocation and another login fit into it.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 5*time.Millisecond)))
		before := f.ps[0].token(t, f.w.otpLogin())
		out := admin(t, f.e, "", "token", "revoke", "--firm", fmt.Sprint(f.w.firm), "--email", "otp@acme.example")
		after := f.ps[1].token(t, f.w.otpLogin())
		revokedAt := int64(out["revokedAt"].(float64))
		b, a := issued(t, before), issued(t, after)
		if b.IAT != revokedAt/1000 || a.IAT != revokedAt/1000 {
			t.Logf("attempt %d: iat %d and %d, revocation in second %d; again", attempt, b.IAT, a.IAT, revokedAt/1000)
			continue
		}
		if !(b.IATMs <= revokedAt && revokedAt < a.IATMs) {
			t.Fatalf("issued at %d and %d ms, revoked at %d: the logins did not bracket the revocation", b.IATMs, a.IATMs, revokedAt)
		}
		f.refusedEverywhere(t, "a token issued before the revocation, in its second", before, time.Now(), testenv.Patience())
		f.readsEverywhere(t, "a token issued after the revocation, in its second", after)

		sec := revokedAt / 1000
		sameSecond := signed(t, f.w.firm, a.FirmUserID, map[string]any{"iat": sec})
		nextSecond := signed(t, f.w.firm, a.FirmUserID, map[string]any{"iat": sec + 1})
		for i, p := range f.ps {
			if r := p.view(t, "/realty/1001", sameSecond); r.status != http.StatusUnauthorized {
				t.Fatalf("replica %d: a token with iat alone in the revocation's second: %d; want 401", i+1, r.status)
			}
			if r := p.view(t, "/realty/1001", nextSecond); r.status != http.StatusOK {
				t.Fatalf("replica %d: a token with iat alone in the next second: %d %s; want 200", i+1, r.status, r.body)
			}
		}
		t.Logf("attempt %d: issued at %d ms (refused) and %d ms (accepted), revoked at %d ms", attempt, b.IATMs, a.IATMs, revokedAt)
		return
	}
	t.Fatalf("in %v of attempts, no login, revocation and login fitted into one second", budget)
}

// TestEndToEndRevocationLatency measures how long after a revocation is
// written both of 2 replicas refuse the token, which each remembered as
// verified: 100 revocations, each written as the CLI writes it (store,
// then the announcement), timed from before the store write. It logs p50
// and p99 (the requirement: within a second); each revocation is waited
// for with the test's patience, and without the announcement none would
// arrive within it (revocationPoll).
func TestEndToEndRevocationLatency(t *testing.T) {
	f := newFleet(t, nil)
	ctx := context.Background()
	store, err := postgres.Open(ctx, f.e["GATEWAY_STORE_URL"], postgres.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer rdb.Close()

	const n = 100
	latencies := make([]time.Duration, 0, n)
	for i := range n {
		tok := f.ps[i%2].token(t, f.w.otpLogin())
		f.readsEverywhere(t, "a fresh token", tok)
		began := time.Now()
		r, err := store.RevokeTokens(ctx, f.w.firm, "otp@acme.example", began)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := revocation.Announce(ctx, rdb, f.prefix, r); err != nil {
			t.Fatal(err)
		}
		latencies = append(latencies, f.refusedEverywhere(t, "a revoked token", tok, began, testenv.Patience()))
		time.Sleep(2 * time.Millisecond) // the next login in a later millisecond
	}
	slices.Sort(latencies)
	rank := func(q float64) time.Duration { return latencies[int(math.Ceil(q*float64(n)))-1] }
	t.Logf("revocation latency, %d revocations on 2 replicas (store write and announcement until both answer 401): p50 %v, p99 %v, max %v",
		n, rank(0.50).Round(10*time.Microsecond), rank(0.99).Round(10*time.Microsecond), latencies[n-1].Round(10*time.Microsecond))
}
