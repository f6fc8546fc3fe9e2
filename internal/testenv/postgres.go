package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// PostgresServer is a PostgreSQL cluster of a test's own (initdb into a
// temporary directory, a free port), which the test may restart; the
// shared server of PostgresURL must not be restarted under other tests.
type PostgresServer struct {
	// URL names its database postgres, trust authentication.
	URL string

	t    testing.TB
	bin  string // the directory of initdb and pg_ctl
	dir  string
	port int
	as   []string // runs a command as the postgres user when root
}

// StartPostgres makes and starts a PostgreSQL cluster of the test's own and
// removes it at the end of the test. It skips (or fails, with services
// required) where the server binaries are missing.
func StartPostgres(t testing.TB) *PostgresServer {
	t.Helper()
	bin, err := postgresBin()
	if err != nil {
		unavailable(t, "PostgreSQL server binaries", err)
	}
	dir, err := os.MkdirTemp("", "gateway-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := &PostgresServer{t: t, bin: bin, dir: dir}
	if os.Geteuid() == 0 { // PostgreSQL refuses to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			unavailable(t, "a postgres user to run PostgreSQL as", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		p.as = []string{"runuser", "-u", "postgres", "--"}
	}
	data := filepath.Join(dir, "data")
	p.run("initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync")
	p.port = freeRedisPort(t)
	p.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
	p.run("pg_ctl", "-D", data, "-l", filepath.Join(dir, "log"), "-w", "-o",
		fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off", p.port, dir), "start")
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "log"))
			t.Logf("PostgreSQL log:\n%s", tail(string(b), 4000))
		}
		_ = p.command("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop").Run()
	})
	return p
}

// Restart restarts the server as an operator's "pg_ctl restart -m fast"
// does: every session is ended, then the server comes back.
func (p *PostgresServer) Restart() {
	p.t.Helper()
	// -l again: without it the new server would write to, and hold open,
	// this command's output.
	p.run("pg_ctl", "-D", filepath.Join(p.dir, "data"), "-l", filepath.Join(p.dir, "log"), "-m", "fast", "-w", "restart")
}

func (p *PostgresServer) command(name string, args ...string) *exec.Cmd {
	argv := append(slices.Clone(p.as), append([]string{filepath.Join(p.bin, name)}, args...)...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.WaitDelay = 5 * time.Second // a server started by it must not hold its output open
	return cmd
}

func (p *PostgresServer) run(name string, args ...string) {
	p.t.Helper()
	if out, err := p.command(name, args...).CombinedOutput(); err != nil {
		p.t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// postgresBin finds the directory of pg_ctl: on PATH, or Debian's newest
// /usr/lib/postgresql/N/bin.
func postgresBin() (string, error) {
	if path, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(path), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return va - vb
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "pg_ctl")); err == nil {
			return dirs[i], nil
		}
	}
	return "", exec.ErrNotFound
}
