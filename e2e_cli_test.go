package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/realty-gateway/gateway/internal/gatewaytest"
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
