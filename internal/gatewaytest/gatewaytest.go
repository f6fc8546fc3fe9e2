// Package gatewaytest owns the harness that tests use to meet the gateway
// as a client would: it builds the binary from the module root, runs it on
// free ports and waits for readiness, runs its admin subcommands, reads its
// /stats. (Faults in its dependencies are package faultproxy's.) A Process
// belongs to the test that created it and is shut down in that test's
// Cleanup.
//
// Concurrency: Build, Start and Admin may be called from parallel tests.
// The methods of Process are safe for concurrent use, so a load generator
// may use a Process while another goroutine injects a fault.
package gatewaytest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ModuleRoot returns the nearest directory at or above the working
// directory that holds a go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("gatewaytest: no go.mod at or above the working directory")
		}
		dir = parent
	}
}

// Build compiles the gateway (the module root's main package) into dir and
// returns the binary's path.
func Build(dir string) (bin string, err error) {
	return BuildTagged(dir, "gateway", "")
}

// BuildTagged compiles the gateway with build tags (such as "faultpoints",
// which arms internal/faultpoint) into dir/name.
func BuildTagged(dir, name, tags string) (bin string, err error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	bin = filepath.Join(dir, name)
	// -buildvcs=auto: a GOFLAGS of the machine may turn stamping off, and
	// "gateway version" names the commit it was built from.
	cmd := exec.Command("go", "build", "-buildvcs=auto", "-tags", tags, "-o", bin, ".")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build in %s: %w\n%s", root, err, out)
	}
	return bin, nil
}

// Environ is the environment of a gateway process: PATH and HOME, no
// configuration file (GATEWAY_CONFIG=/dev/null), then env, whose entries win.
func Environ(env map[string]string) []string {
	out := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "GATEWAY_CONFIG=/dev/null"}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// FreeAddr returns a 127.0.0.1 address whose port was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Admin runs an admin subcommand of bin (e.g. "firm", "add", "--name", "X")
// with env and stdin, in env's GATEWAY_DATA_DIR, and returns the one JSON
// line it prints. Anything else fails the test.
func Admin(t testing.TB, bin string, env map[string]string, stdin string, args ...string) map[string]any {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = Environ(env)
	cmd.Dir = env["GATEWAY_DATA_DIR"]
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gateway %v: %v\n%s", args, err, stderr.String())
	}
	var out map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || bytes.Count(stdout.Bytes(), []byte("\n")) != 1 {
		t.Fatalf("gateway %v printed %q, want one JSON line", args, stdout.String())
	}
	return out
}
