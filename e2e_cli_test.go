package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"

	"github.com/realty-gateway/gateway/internal/gatewaytest"
	"github.com/realty-gateway/gateway/internal/testenv"
)

// gatewayCmd runs the binary with args and stdin in a SQLite data dir and
// returns its exit code and standard output.
func gatewayCmd(t *testing.T, e environment, stdin string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(gatewayBin, args...)
	cmd.Env = gatewaytest.Environ(e)
	cmd.Dir = e["GATEWAY_DATA_DIR"]
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	default:
		t.Fatal(err)
		return -1, ""
	}
}

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
	// The log reaches the test through a pipe: wait for the last lines.
	testenv.WaitFor(t, func() bool { return accessLines(p.Logs()) >= 5 })
	logs := p.Logs()
	for _, secret := range []string{w.password, "wrong-password-guess", w.key, w.key2, tok, e["GATEWAY_JWT_SECRET"], "pg-password-in-the-url"} {
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
