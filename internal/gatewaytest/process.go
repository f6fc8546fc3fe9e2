package gatewaytest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/feed"
	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/revocation"
)

// Process is a running gateway. Base and AdminBase are its two listeners
// as http:// URLs; Env is the environment it was started with, including
// the chosen GATEWAY_ADDR and GATEWAY_ADMIN_ADDR.
type Process struct {
	Base      string
	AdminBase string
	Env       map[string]string

	cmd  *exec.Cmd
	logs syncBuffer
	done chan struct{}
	err  error // set before done is closed
}

// Start runs bin with env, GATEWAY_ADDR and GATEWAY_ADMIN_ADDR on port 0
// (env itself is not modified), reads the ports the kernel picked from the
// "gateway listening" log line (level info) and waits up to
// testenv.Patience for /readyz to answer 204. Picking a free port
// beforehand races with every other socket on the machine; port 0 does not. In t.Cleanup it sends
// SIGTERM and waits for the exit (killing after 30 s); when the test
// failed it logs the gateway's output, clipped to its first 16 KiB and
// last 48 KiB.
func Start(t testing.TB, bin string, env map[string]string) *Process {
	t.Helper()
	env = maps.Clone(env)
	if env == nil {
		env = map[string]string{}
	}
	env["GATEWAY_ADDR"], env["GATEWAY_ADMIN_ADDR"] = "127.0.0.1:0", "127.0.0.1:0"
	cmd := exec.Command(bin)
	cmd.Env = Environ(env)
	cmd.Dir = env["GATEWAY_DATA_DIR"]
	p := &Process{Env: env, cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &p.logs, &p.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("gateway log (%s):\n%s", p.Base, clip(p.Logs()))
		}
	})

	client := &http.Client{Timeout: time.Second} // a try; the wait is the patience
	patience := testenv.Patience()
	deadline := time.Now().Add(patience)
	for !p.ready(client) {
		select {
		case <-p.done:
			t.Fatalf("gateway exited before it was ready (%v):\n%s", p.err, p.Logs())
		default:
		}
		if time.Now().After(deadline) {
			if p.Base == "" {
				t.Fatalf("gateway logged no \"gateway listening\" line (at level info) in %v:\n%s", patience, p.Logs())
			}
			t.Fatalf("gateway not ready in %v:\n%s", patience, p.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return p
}

// ready reports whether the process logged its listeners and its /readyz
// answers 204; it fills in Base, AdminBase and Env's addresses once they
// are logged.
func (p *Process) ready(client *http.Client) bool {
	if p.Base == "" {
		public, admin, ok := listening(p.Logs())
		if !ok {
			return false
		}
		p.Base, p.AdminBase = "http://"+public, "http://"+admin
		p.Env["GATEWAY_ADDR"], p.Env["GATEWAY_ADMIN_ADDR"] = public, admin
	}
	resp, err := client.Get(p.AdminBase + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusNoContent
}

// listening finds the "gateway listening" line in logs and returns the
// addresses it names.
func listening(logs string) (public, admin string, ok bool) {
	for line := range strings.Lines(logs) {
		var l struct{ Msg, Addr, Admin string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "gateway listening" && l.Addr != "" && l.Admin != "" {
			return l.Addr, l.Admin, true
		}
	}
	return "", "", false
}

// Logs returns everything the process wrote to stdout and stderr so far.
func (p *Process) Logs() string { return p.logs.String() }

// Signal sends sig to the process; after the exit it does nothing.
func (p *Process) Signal(sig os.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
		return p.cmd.Process.Signal(sig)
	}
}

// Wait waits for the process to exit and returns its exit error. It may
// be called any number of times.
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Stats is the gateway's /stats document. Members that this type does not
// name are ignored.
type Stats struct {
	Cache       cache.Stats `json:"cache"`
	BreakerOpen bool        `json:"breakerOpen"`
	Panics      uint64      `json:"panics"`
	Purges      struct {
		Sent, Failed, Dropped uint64
	} `json:"purges"`
	Feed        feed.Stats       `json:"feed"`
	Revocations revocation.Stats `json:"revocations"`
}

// Stats reads /stats from the admin listener; a failure fails the test.
func (p *Process) Stats(t testing.TB) Stats {
	t.Helper()
	s, err := p.ReadStats()
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	return s
}

// ReadStats reads /stats from the admin listener. Unlike Stats it may be
// called from any goroutine.
func (p *Process) ReadStats() (Stats, error) {
	var s Stats
	client := &http.Client{Timeout: testenv.Patience()}
	resp, err := client.Get(p.AdminBase + "/stats")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// clip keeps the start and the end of a long log.
func clip(log string) string {
	const head, tail = 16 << 10, 48 << 10
	if len(log) <= head+tail {
		return log
	}
	return fmt.Sprintf("%s\n… %d bytes elided …\n%s", log[:head], len(log)-head-tail, log[len(log)-tail:])
}

// syncBuffer collects a process's output from two pipes at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// RSS is the gateway process's resident set size in bytes, from
// /proc/PID/status (Linux).
func (p *Process) RSS() (int64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(status)) {
		if kb, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(kb), " kB"), 10, 64)
			return n << 10, err
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}
