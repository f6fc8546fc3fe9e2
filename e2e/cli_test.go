package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // the "sqlite" driver of rawStore

	"github.com/realty-gateway/gateway/gateway"
	"github.com/realty-gateway/gateway/internal/gatewaytest"
	"github.com/realty-gateway/gateway/internal/testenv"
)

func TestEndToEndCLIExitCodes(t *testing.T) {
	e := environment{"GATEWAY_DATA_DIR": t.TempDir(), "GATEWAY_STORE_URL": "sqlite:cli.db"}
	tests := []struct {
		name string
		give []string
		want int
	}{
		{name: "help", give: []string{"--help"}, want: 0},
		{name: "-h", give: []string{"-h"}, want: 0},
		{name: "help word", give: []string{"help"}, want: 0},
		{name: "version", give: []string{"version"}, want: 0},
		{name: "a subcommand's -h", give: []string{"firm", "add", "-h"}, want: 0},
		{name: "unknown subcommand", give: []string{"bogus", "thing"}, want: 2},
		{name: "half a subcommand", give: []string{"firm"}, want: 2},
		{name: "missing flag", give: []string{"firm", "add"}, want: 2},
		{name: "unknown flag", give: []string{"firm", "add", "--nope", "x"}, want: 2},
		{name: "stray argument", give: []string{"firm", "add", "--name", "x", "extra"}, want: 2},
		{name: "both password flags", give: []string{"user", "add", "--firm", "1", "--email", "a@b.c", "--password", "p", "--password-stdin"}, want: 2},
		{name: "cdn purge without a purge API", give: []string{"cdn", "purge", "--listing", "1"}, want: 1},
		{name: "runtime failure", give: []string{"listing", "import", "/nonexistent/file.json"}, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, out := gatewayCmd(t, e, "", tt.give...); got != tt.want {
				t.Fatalf("gateway %v exited %d, want %d (%s)", tt.give, got, tt.want, out)
			}
		})
	}
	_, out := gatewayCmd(t, e, "", "version")
	var v map[string]string
	if err := json.Unmarshal([]byte(out), &v); err != nil || !strings.HasPrefix(v["go"], "go") {
		t.Fatalf("version printed %q", out)
	}
	// Built in a git checkout, the binary names its commit.
	if head, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		if want := strings.TrimSpace(string(head)); v["revision"] != want {
			t.Errorf("version names revision %q, want HEAD %s", v["revision"], want)
		}
	}
}

// TestEndToEndPasswordFromStdin: the password never needs to be an
// argument; the account it makes logs in with it.
func TestEndToEndPasswordFromStdin(t *testing.T) {
	e := environment{"GATEWAY_DATA_DIR": t.TempDir(), "GATEWAY_STORE_URL": "sqlite:cli.db", "GATEWAY_JWT_SECRET": "cli-secret-cli-secret-cli-secret-cli"}
	f := admin(t, e, "", "firm", "add", "--name", "Stdin Realty")
	admin(t, e, "s3cret from stdin\n", "user", "add", "--firm", fmt.Sprint(f["firmId"]), "--email", "in@stdin.example", "--password-stdin")
	if code, _ := gatewayCmd(t, e, "", "user", "add", "--firm", fmt.Sprint(f["firmId"]), "--email", "empty@stdin.example", "--password-stdin"); code != 2 {
		t.Fatalf("--password-stdin with nothing on stdin exited %d, want 2", code)
	}
	p := start(t, e)
	p.token(t, fmt.Sprintf(`{"email":"in@stdin.example","password":"s3cret from stdin","key":%q}`, f["apiKey"]))
	if r := p.login(t, fmt.Sprintf(`{"email":"in@stdin.example","key":%q}`, f["apiKey"])); r.status != 401 {
		t.Fatalf("the account from stdin logs in without its password: %d", r.status)
	}
}

// TestEndToEndLogHoldsNoSecret runs a gateway with every access logged
// through logins, views, a write and failures, then scans its whole log
// for each secret used, and checks the access lines.
func TestEndToEndLogHoldsNoSecret(t *testing.T) {
	e, _ := postgresEnv(t, testenv.PostgresURL(t), testenv.RedisAddr(t))
	// Trust authentication ignores the password, so it can be any secret.
	pgURL, err := url.Parse(e["GATEWAY_STORE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	pgURL.User = url.UserPassword(pgURL.User.Username(), "pg-password-in-the-url")
	e["GATEWAY_STORE_URL"] = pgURL.String()
	e["GATEWAY_ACCESS_LOG"] = "all"
	e["GATEWAY_LOG_LEVEL"] = "debug"
	// A CDN purge API and a trace collector, each with a credential, that
	// refuse every connection: their failures are logged.
	dead := "http://" + gatewaytest.FreeAddr(t)
	e["GATEWAY_CDN_PURGE_URL"] = dead + "/purge/{key}"
	e["GATEWAY_CDN_PURGE_HEADER"] = "Purge-Token: cdn-secret-in-a-header"
	e["GATEWAY_OTLP_ENDPOINT"] = dead
	e["OTEL_EXPORTER_OTLP_HEADERS"] = "Authorization=Bearer%20otlp-secret-in-a-header"
	e["OTEL_BSP_SCHEDULE_DELAY"] = "100"
	w := newWorld(t, e)
	p := start(t, e)
	tok := p.token(t, w.passwordLogin())
	p.login(t, fmt.Sprintf(`{"email":"agent@acme.example","password":"wrong-password-guess","key":%q}`, w.key))
	p.view(t, "/realty/1001", tok)
	p.view(t, "/realty/1001", tok+"tampered")
	r := p.request(t, http.MethodPut, "/realty/1001", map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json",
		"X-Request-ID": "trace-abc-123"}, `{"title":"Logged","categoryId":2,"location":{"cityId":34}}`)
	if r.status != 200 || r.header.Get("X-Request-ID") != "trace-abc-123" {
		t.Fatalf("PUT: %d, X-Request-ID %q", r.status, r.header.Get("X-Request-ID"))
	}
	accessLines := func(logs string) (n int) {
		for line := range strings.Lines(logs) {
			if strings.Contains(line, `"msg":"request"`) {
				n++
			}
		}
		return n
	}
	// The log reaches the test through a pipe: wait for the last lines,
	// and for the failed span export.
	testenv.WaitFor(t, func() bool {
		return accessLines(p.Logs()) >= 5 && strings.Contains(p.Logs(), "tracing: spans not exported")
	})
	logs := p.Logs()
	for _, secret := range []string{w.password, "wrong-password-guess", w.key, w.key2, tok, e["GATEWAY_JWT_SECRET"], "pg-password-in-the-url",
		"cdn-secret-in-a-header", "otlp-secret-in-a-header"} {
		if strings.Contains(logs, secret) {
			t.Errorf("the log holds a secret (%.6s…)", secret)
		}
	}
	var requests int
	for line := range strings.Lines(logs) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "request" {
			continue
		}
		requests++
		for _, member := range []string{"requestId", "method", "route", "status", "durationMs", "bytes"} {
			if _, ok := rec[member]; !ok {
				t.Errorf("access line without %s: %s", member, line)
			}
		}
		if rec["route"] == "/realty/:ref" && rec["method"] == "PUT" && rec["requestId"] != "trace-abc-123" {
			t.Errorf("the write's access line names another request: %s", line)
		}
		if rec["status"] == 401.0 && rec["bytes"] == 0.0 {
			t.Errorf("an error's access line counts no body: %s", line)
		}
	}
	if requests < 5 {
		t.Fatalf("%d access lines for 5 requests:\n%s", requests, logs)
	}
}

// TestEndToEndAccountCommandsUsage: the command lines of firm rotate-key,
// user disable, user enable and token revoke, as the binary parses them. Usage errors exit 2 and
// print the command's usage, -h exits 0, an unknown firm or user exits 1
// and says which, and none of them prints anything on standard output.
func TestEndToEndAccountCommandsUsage(t *testing.T) {
	e := environment{"GATEWAY_DATA_DIR": t.TempDir(), "GATEWAY_STORE_URL": "sqlite:cli.db"}
	f := admin(t, e, "", "firm", "add", "--name", "Usage Realty")
	firm := fmt.Sprint(f["firmId"])
	admin(t, e, "", "user", "add", "--firm", firm, "--email", "known@usage.example")
	const (
		rotateUse  = "usage: gateway firm rotate-key --firm N [--keep-tokens]"
		disableUse = "usage: gateway user disable --firm N --email E"
		enableUse  = "usage: gateway user enable --firm N --email E"
		revokeUse  = "usage: gateway token revoke --firm N [--email E]"
	)
	tests := []struct {
		name       string
		give       []string
		want       int
		wantStderr string // a part of it
	}{
		{name: "rotate-key -h", give: []string{"firm", "rotate-key", "-h"}, want: 0, wantStderr: "-firm"},
		{name: "rotate-key --help", give: []string{"firm", "rotate-key", "--help"}, want: 0, wantStderr: "-firm"},
		{name: "rotate-key without --firm", give: []string{"firm", "rotate-key"}, want: 2, wantStderr: rotateUse},
		{name: "rotate-key --firm 0", give: []string{"firm", "rotate-key", "--firm", "0"}, want: 2, wantStderr: rotateUse},
		{name: "rotate-key negative firm", give: []string{"firm", "rotate-key", "--firm", "-4"}, want: 2, wantStderr: rotateUse},
		{name: "rotate-key firm not a number", give: []string{"firm", "rotate-key", "--firm", "acme"}, want: 2, wantStderr: rotateUse},
		{name: "rotate-key --firm without a value", give: []string{"firm", "rotate-key", "--firm"}, want: 2, wantStderr: rotateUse},
		{name: "rotate-key unknown flag", give: []string{"firm", "rotate-key", "--firm", firm, "--name", "x"}, want: 2, wantStderr: rotateUse},
		{name: "rotate-key stray argument", give: []string{"firm", "rotate-key", "--firm", firm, "now"}, want: 2, wantStderr: rotateUse},
		{name: "rotate-key firm as an argument", give: []string{"firm", "rotate-key", firm}, want: 2, wantStderr: rotateUse},
		{name: "rotate-key unknown firm", give: []string{"firm", "rotate-key", "--firm", "999"}, want: 1, wantStderr: "gateway: rotate key: no firm 999"},
		{name: "disable -h", give: []string{"user", "disable", "-h"}, want: 0, wantStderr: "-email"},
		{name: "disable without flags", give: []string{"user", "disable"}, want: 2, wantStderr: disableUse},
		{name: "disable without --email", give: []string{"user", "disable", "--firm", firm}, want: 2, wantStderr: disableUse},
		{name: "disable blank e-mail", give: []string{"user", "disable", "--firm", firm, "--email", "  "}, want: 2, wantStderr: disableUse},
		{name: "disable without --firm", give: []string{"user", "disable", "--email", "known@usage.example"}, want: 2, wantStderr: disableUse},
		{name: "disable --firm 0", give: []string{"user", "disable", "--firm", "0", "--email", "known@usage.example"}, want: 2, wantStderr: disableUse},
		{name: "disable firm not a number", give: []string{"user", "disable", "--firm", "x", "--email", "known@usage.example"}, want: 2, wantStderr: disableUse},
		{name: "disable unknown flag", give: []string{"user", "disable", "--firm", firm, "--email", "known@usage.example", "--password", "p"}, want: 2, wantStderr: disableUse},
		{name: "disable stray argument", give: []string{"user", "disable", "--firm", firm, "--email", "known@usage.example", "extra"}, want: 2, wantStderr: disableUse},
		{name: "disable unknown user", give: []string{"user", "disable", "--firm", firm, "--email", "Nobody@Usage.example"}, want: 1,
			wantStderr: "gateway: disable user: firm " + firm + " has no user nobody@usage.example"},
		{name: "disable user of an unknown firm", give: []string{"user", "disable", "--firm", "999", "--email", "known@usage.example"}, want: 1,
			wantStderr: "gateway: disable user: firm 999 has no user known@usage.example"},
		{name: "rotate-key --keep-tokens with a value", give: []string{"firm", "rotate-key", "--firm", firm, "--keep-tokens=maybe"}, want: 2, wantStderr: rotateUse},
		{name: "enable -h", give: []string{"user", "enable", "-h"}, want: 0, wantStderr: "-email"},
		{name: "enable without --email", give: []string{"user", "enable", "--firm", firm}, want: 2, wantStderr: enableUse},
		{name: "enable --firm 0", give: []string{"user", "enable", "--firm", "0", "--email", "known@usage.example"}, want: 2, wantStderr: enableUse},
		{name: "enable stray argument", give: []string{"user", "enable", "--firm", firm, "--email", "known@usage.example", "x"}, want: 2, wantStderr: enableUse},
		{name: "enable unknown user", give: []string{"user", "enable", "--firm", firm, "--email", "Nobody@Usage.example"}, want: 1,
			wantStderr: "gateway: enable user: firm " + firm + " has no user nobody@usage.example"},
		{name: "revoke -h", give: []string{"token", "revoke", "-h"}, want: 0, wantStderr: "-email"},
		{name: "revoke without flags", give: []string{"token", "revoke"}, want: 2, wantStderr: revokeUse},
		{name: "revoke --firm 0", give: []string{"token", "revoke", "--firm", "0"}, want: 2, wantStderr: revokeUse},
		{name: "revoke blank e-mail", give: []string{"token", "revoke", "--firm", firm, "--email", " "}, want: 2, wantStderr: revokeUse},
		{name: "revoke unknown flag", give: []string{"token", "revoke", "--firm", firm, "--user", "1"}, want: 2, wantStderr: revokeUse},
		{name: "revoke stray argument", give: []string{"token", "revoke", "--firm", firm, "now"}, want: 2, wantStderr: revokeUse},
		{name: "revoke unknown firm", give: []string{"token", "revoke", "--firm", "999"}, want: 1, wantStderr: "gateway: revoke tokens: no firm 999"},
		{name: "revoke unknown user", give: []string{"token", "revoke", "--firm", firm, "--email", "nobody@usage.example"}, want: 1,
			wantStderr: "gateway: revoke tokens: firm " + firm + " has no user nobody@usage.example"},
		{name: "unknown account subcommand", give: []string{"firm", "rotate"}, want: 2, wantStderr: "gateway firm rotate-key --firm N"},
		{name: "unknown token subcommand", give: []string{"token", "list"}, want: 2, wantStderr: "gateway token revoke --firm N [--email E]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := gatewayCmdStderr(t, e, "", tt.give...)
			if code != tt.want || !strings.Contains(stderr, tt.wantStderr) || stdout != "" {
				t.Fatalf("gateway %q exited %d, want %d; stdout %q; stderr, want it to hold %q:\n%s",
					tt.give, code, tt.want, stdout, tt.wantStderr, stderr)
			}
		})
	}
	// None of them changed anything: the user still logs in.
	e["GATEWAY_JWT_SECRET"] = "cli-secret-cli-secret-cli-secret-cli"
	start(t, e).token(t, fmt.Sprintf(`{"email":"known@usage.example","key":%q}`, f["apiKey"]))
}

// accountEngines are the stores the account commands are tested on end to
// end, each in a database of its own: SQLite in a data directory, and a
// fresh PostgreSQL database. Neither uses Redis: logins never read it but
// for their limits, which are then kept in process, and revocations reach
// the gateway through its poll of the store (every 100 ms here).
var accountEngines = []accountEngine{
	{name: "sqlite", env: func(t *testing.T) environment {
		return environment{"GATEWAY_DATA_DIR": t.TempDir(), "GATEWAY_STORE_URL": "sqlite:gateway.db",
			"GATEWAY_JWT_SECRET": "acct-secret-acct-secret-acct-secret-acct", "GATEWAY_REVOCATION_POLL": "100ms"}
	}},
	{name: "postgres", env: func(t *testing.T) environment {
		return environment{"GATEWAY_DATA_DIR": t.TempDir(), "GATEWAY_STORE_URL": testenv.PostgresURL(t),
			"GATEWAY_JWT_SECRET": "acct-secret-acct-secret-acct-secret-acct", "GATEWAY_REVOCATION_POLL": "100ms"}
	}},
}

type accountEngine struct {
	name string
	env  func(t *testing.T) environment
}

// start makes the world in a fresh store of the engine and starts a gateway
// on it.
func (a accountEngine) start(t *testing.T) (environment, world, *process) {
	t.Helper()
	e := a.env(t)
	w := newWorld(t, e)
	return e, w, start(t, e)
}

// requireRefusedSoon fails unless p answers tok with 401 within the test's
// patience.
func requireRefusedSoon(t *testing.T, p *process, what, tok string) {
	t.Helper()
	deadline := time.Now().Add(testenv.Patience())
	for {
		r := p.view(t, "/realty/1001", tok)
		if r.status == http.StatusUnauthorized {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d %s; want 401 (GATEWAY_TEST_PATIENCE)", what, r.status, r.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEndToEndRotateKey: firm rotate-key prints a new key once; at once
// the old key no longer logs in, answered as any unknown key, and the new
// one does, for every user of the firm. Tokens issued before are revoked
// (without Redis, within the poll interval); with --keep-tokens they stay.
// The other firm is untouched.
func TestEndToEndRotateKey(t *testing.T) {
	for _, engine := range accountEngines {
		t.Run(engine.name, func(t *testing.T) {
			e, w, p := engine.start(t)
			before := p.token(t, w.passwordLogin())

			out := admin(t, e, "", "firm", "rotate-key", "--firm", fmt.Sprint(w.firm))
			newKey, _ := out["apiKey"].(string)
			if out["firmId"] != float64(w.firm) || !strings.HasPrefix(newKey, "rk_") || len(newKey) != len(w.key) || newKey == w.key {
				t.Fatalf("rotate-key printed %v; want firm %d and a new key like %.3s…", out, w.firm, w.key)
			}

			oldKey := p.login(t, w.passwordLogin())
			unknownKey := p.login(t, fmt.Sprintf(`{"email":"agent@acme.example","password":%q,"key":"rk_unknown"}`, w.password))
			requireSameRejection(t, "login with the old key", oldKey, unknownKey)
			requireSameRejection(t, "passwordless login with the old key", p.login(t, w.otpLogin()), unknownKey)

			requireRefusedSoon(t, p, "a token issued before the rotation", before)
			kept := p.token(t, fmt.Sprintf(`{"email":"agent@acme.example","password":%q,"key":%q}`, w.password, newKey))
			p.token(t, fmt.Sprintf(`{"email":"otp@acme.example","key":%q}`, newKey))
			other := p.token(t, w.otherLogin())

			// Once more, keeping the tokens: only the newest key logs in.
			out = admin(t, e, "", "firm", "rotate-key", "--firm", fmt.Sprint(w.firm), "--keep-tokens")
			newest := out["apiKey"].(string)
			if out["tokensKept"] != true || out["revokedAt"] != nil {
				t.Fatalf("rotate-key --keep-tokens printed %v", out)
			}
			// Past two polls, the tokens issued with the replaced key and
			// the other firm's still read.
			time.Sleep(250 * time.Millisecond)
			for _, tok := range []string{kept, other} {
				if r := p.view(t, "/realty/1001", tok); r.status != http.StatusOK {
					t.Fatalf("a token kept by --keep-tokens, or of the other firm: %d %s", r.status, r.body)
				}
			}
			requireSameRejection(t, "login with the replaced key",
				p.login(t, fmt.Sprintf(`{"email":"otp@acme.example","key":%q}`, newKey)), unknownKey)
			p.token(t, fmt.Sprintf(`{"email":"otp@acme.example","key":%q}`, newest))
			if strings.Contains(p.Logs(), newKey) || strings.Contains(p.Logs(), newest) {
				t.Fatal("a rotated key reached the gateway's log")
			}
		})
	}
}

// TestEndToEndUserDisable: a disabled user's login, with the right
// password, answers exactly as a wrong password and as an unknown e-mail,
// so the answer does not tell that the account exists. Other users go on;
// tokens issued before are revoked (without Redis, within the poll
// interval).
func TestEndToEndUserDisable(t *testing.T) {
	for _, engine := range accountEngines {
		t.Run(engine.name, func(t *testing.T) {
			e, w, p := engine.start(t)
			before := p.token(t, w.passwordLogin())
			wrongPassword := p.login(t, fmt.Sprintf(`{"email":"agent@acme.example","password":"not-it","key":%q}`, w.key))
			unknownEmail := p.login(t, fmt.Sprintf(`{"email":"nobody@acme.example","password":%q,"key":%q}`, w.password, w.key))
			requireSameRejection(t, "an unknown e-mail", unknownEmail, wrongPassword)

			disable := func(email string) {
				t.Helper()
				out := admin(t, e, "", "user", "disable", "--firm", fmt.Sprint(w.firm), "--email", email)
				if out["firmUserId"] == nil || out["disabled"] != true || out["revokedAt"] == nil || out["announced"] != false {
					t.Fatalf("user disable printed %v", out)
				}
			}
			disable(" Agent@ACME.example ")
			requireSameRejection(t, "the disabled user with its password", p.login(t, w.passwordLogin()), wrongPassword)
			requireSameRejection(t, "the disabled user with a wrong password",
				p.login(t, fmt.Sprintf(`{"email":"agent@acme.example","password":"not-it","key":%q}`, w.key)), wrongPassword)
			requireSameRejection(t, "the disabled user without a password",
				p.login(t, fmt.Sprintf(`{"email":"agent@acme.example","key":%q}`, w.key)), wrongPassword)

			// The rest of the firm, and the same e-mail elsewhere, go on.
			otp := p.token(t, w.otpLogin())
			p.token(t, w.otherLogin())
			requireRefusedSoon(t, p, "a token issued before the user was disabled", before)
			if r := p.view(t, "/realty/1001", otp); r.status != http.StatusOK {
				t.Fatalf("another user's token: %d %s", r.status, r.body)
			}

			// Disabling again changes nothing; a passwordless user is
			// disabled alike; the e-mail stays taken.
			disable("agent@acme.example")
			disable("otp@acme.example")
			requireSameRejection(t, "the disabled passwordless user", p.login(t, w.otpLogin()), wrongPassword)
			if code, stdout, stderr := gatewayCmdStderr(t, e, "", "user", "add", "--firm", fmt.Sprint(w.firm), "--email", "agent@acme.example"); code != 1 || stdout != "" {
				t.Fatalf("user add with a disabled user's e-mail exited %d, want 1 (%s%s)", code, stdout, stderr)
			}
		})
	}
}

// TestEndToEndUpgradeFromVersion3: a store made by the release before
// disabled users (schema version 3, written here by its migration steps,
// which are never edited) holding a firm and a user is upgraded when the
// gateway opens it: the user logs in with the old key as before, and both
// account commands then work on it.
func TestEndToEndUpgradeFromVersion3(t *testing.T) {
	const oldVersion = 3
	for _, engine := range accountEngines {
		t.Run(engine.name, func(t *testing.T) {
			e := engine.env(t)
			key, err := gateway.NewAPIKey()
			if err != nil {
				t.Fatal(err)
			}
			const password = "old-release-password"
			hash, err := gateway.HashPassword(password)
			if err != nil {
				t.Fatal(err)
			}
			db := openRawStore(t, engine.name, e)
			steps, err := filepath.Glob(filepath.Join("..", "upstream", engine.name, "migrations", "*.sql"))
			if err != nil || len(steps) <= oldVersion {
				t.Fatalf("migrations of %s: %v, %v", engine.name, steps, err)
			}
			newVersion := len(steps) // every step of this build
			for _, step := range steps[:oldVersion] {
				db.execFile(t, step)
			}
			db.setVersion(t, oldVersion)
			db.exec(t, `INSERT INTO firms (name, key_digest) VALUES ('Old Realty', $1)`, gateway.KeyDigest(key))
			db.exec(t, `INSERT INTO firm_users (firm_id, email, password_hash)
				SELECT id, 'agent@old.example', $1 FROM firms WHERE name = 'Old Realty'`, hash)
			db.exec(t, `INSERT INTO firm_users (firm_id, email)
				SELECT id, 'otp@old.example' FROM firms WHERE name = 'Old Realty'`)
			firm := db.firmID(t, "Old Realty")
			if v := db.version(t); v != oldVersion {
				t.Fatalf("schema version of the old store = %d, want %d", v, oldVersion)
			}

			db.close(t) // SQLite: so that the gateway can turn on WAL mode

			p := start(t, e)
			db = openRawStore(t, engine.name, e)
			if v := db.version(t); v != newVersion {
				t.Fatalf("schema version after the gateway opened the store = %d, want %d", v, newVersion)
			}
			login := func(email, password, key string) string {
				if password == "" {
					return fmt.Sprintf(`{"email":%q,"key":%q}`, email, key)
				}
				return fmt.Sprintf(`{"email":%q,"password":%q,"key":%q}`, email, password, key)
			}
			p.token(t, login("agent@old.example", password, key))
			p.token(t, login("otp@old.example", "", key))

			newKey := admin(t, e, "", "firm", "rotate-key", "--firm", fmt.Sprint(firm))["apiKey"].(string)
			unknownKey := p.login(t, login("agent@old.example", password, "rk_unknown"))
			requireSameRejection(t, "the old key after the upgrade", p.login(t, login("agent@old.example", password, key)), unknownKey)
			p.token(t, login("agent@old.example", password, newKey))

			admin(t, e, "", "user", "disable", "--firm", fmt.Sprint(firm), "--email", "agent@old.example")
			wrongPassword := p.login(t, login("otp@old.example", "wrong", newKey))
			requireSameRejection(t, "the upgraded user, disabled", p.login(t, login("agent@old.example", password, newKey)), wrongPassword)
			p.token(t, login("otp@old.example", "", newKey))
		})
	}
}

// rawStore is a store's database opened beside the gateway, as the
// release before this one or an operator would.
type rawStore struct {
	engine string
	sqlDB  *sql.DB   // sqlite
	pgConn *pgx.Conn // postgres
}

func openRawStore(t *testing.T, engine string, e environment) *rawStore {
	t.Helper()
	r := &rawStore{engine: engine}
	var err error
	switch engine {
	case "sqlite":
		path := filepath.Join(e["GATEWAY_DATA_DIR"], strings.TrimPrefix(e["GATEWAY_STORE_URL"], "sqlite:"))
		r.sqlDB, err = sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_pragma=foreign_keys(1)")
		if err == nil {
			t.Cleanup(func() { r.sqlDB.Close() })
		}
	case "postgres":
		r.pgConn, err = pgx.Connect(context.Background(), e["GATEWAY_STORE_URL"])
		if err == nil {
			// Closed before the database is dropped: cleanups run last first.
			t.Cleanup(func() { r.pgConn.Close(context.Background()) })
		}
	}
	if err != nil {
		t.Fatalf("open the %s store: %v", engine, err)
	}
	return r
}

func (r *rawStore) close(t *testing.T) {
	t.Helper()
	var err error
	if r.sqlDB != nil {
		err = r.sqlDB.Close()
	} else {
		err = r.pgConn.Close(context.Background())
	}
	if err != nil {
		t.Fatalf("close the %s store: %v", r.engine, err)
	}
}

func (r *rawStore) exec(t *testing.T, stmt string, args ...any) {
	t.Helper()
	var err error
	if r.sqlDB != nil {
		_, err = r.sqlDB.Exec(stmt, args...)
	} else {
		_, err = r.pgConn.Exec(context.Background(), stmt, args...)
	}
	if err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// execFile runs a migration step, several statements at once.
func (r *rawStore) execFile(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r.exec(t, string(b))
}

// setVersion records the schema version as the engine's store does.
func (r *rawStore) setVersion(t *testing.T, v int) {
	t.Helper()
	if r.sqlDB != nil {
		r.exec(t, fmt.Sprintf(`PRAGMA user_version = %d`, v))
		return
	}
	r.exec(t, `CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`)
	for i := 1; i <= v; i++ {
		r.exec(t, `INSERT INTO schema_version (version) VALUES ($1)`, i)
	}
}

func (r *rawStore) queryInt(t *testing.T, query string, args ...any) int64 {
	t.Helper()
	var n int64
	var err error
	if r.sqlDB != nil {
		err = r.sqlDB.QueryRow(query, args...).Scan(&n)
	} else {
		err = r.pgConn.QueryRow(context.Background(), query, args...).Scan(&n)
	}
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func (r *rawStore) version(t *testing.T) int {
	t.Helper()
	if r.sqlDB != nil {
		return int(r.queryInt(t, `PRAGMA user_version`))
	}
	return int(r.queryInt(t, `SELECT COALESCE(MAX(version), 0) FROM schema_version`))
}

func (r *rawStore) firmID(t *testing.T, name string) int64 {
	t.Helper()
	return r.queryInt(t, `SELECT id FROM firms WHERE name = $1`, name)
}
