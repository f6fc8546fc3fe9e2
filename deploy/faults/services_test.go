package faults

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/realty-gateway/gateway/internal/gatewaytest"
	"github.com/realty-gateway/gateway/internal/testenv"
)

// redisServer is a redis-server process of the suite's own, on a fixed
// port, without persistence, so that killing and pausing it disturbs no
// other test.
type redisServer struct {
	t    *testing.T
	bin  string
	dir  string
	addr string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// startRedis runs redis-server on a free port, or skips (fails with
// GATEWAY_TEST_REQUIRE_SERVICES=1) when there is no redis-server binary.
func startRedis(t *testing.T) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if testenv.RequireServices() {
			t.Fatalf("redis-server not found and GATEWAY_TEST_REQUIRE_SERVICES=1: %v", err)
		}
		t.Skipf("SKIP: redis-server not found (%v); install it to run the fault suite", err)
	}
	r := &redisServer{t: t, bin: bin, dir: t.TempDir(), addr: gatewaytest.FreeAddr(t)}
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.mu.Lock()
		cmd, done := r.cmd, r.done
		r.mu.Unlock()
		if cmd != nil {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return r
}

func (r *redisServer) start() error {
	_, port, _ := net.SplitHostPort(r.addr)
	cmd := exec.Command(r.bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
		"--dir", r.dir, "--logfile", "redis.log")
	cmd.Dir = r.dir
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	r.mu.Lock()
	r.cmd, r.done = cmd, done
	r.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if r.ping() == nil {
			return nil
		}
		select {
		case <-done:
			log, _ := os.ReadFile(r.dir + "/redis.log")
			return fmt.Errorf("redis-server on %s exited at start:\n%s", r.addr, log)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s not answering PING in 10s", r.addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ping sends one PING and wants +PONG.
func (r *redisServer) ping() error {
	c, err := net.DialTimeout("tcp", r.addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

func (r *redisServer) signal(sig syscall.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return fmt.Errorf("redis-server is not running")
	}
	return r.cmd.Process.Signal(sig)
}

// kill ends the process with SIGKILL, as a crash would: its data is gone.
func (r *redisServer) kill() error {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.cmd = nil
	r.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("redis-server is not running")
	}
	if err := cmd.Process.Kill(); err != nil {
		return err
	}
	<-done
	return nil
}

// restart starts a new, empty redis-server on the same address.
func (r *redisServer) restart() error { return r.start() }

// pause stops the process (SIGSTOP): connections are accepted by the
// kernel but never answered. resume continues it.
func (r *redisServer) pause() error  { return r.signal(syscall.SIGSTOP) }
func (r *redisServer) resume() error { return r.signal(syscall.SIGCONT) }

// postgresDB controls the suite's own database on the shared server through
// a maintenance connection, never touching other databases.
type postgresDB struct {
	url   string // the gateway's store URL
	name  string
	admin *pgx.Conn
	mu    sync.Mutex
}

// newPostgresDB creates a fresh database (dropped after the test) and
// opens a maintenance connection to the server's admin database.
func newPostgresDB(t *testing.T) *postgresDB {
	t.Helper()
	dbURL := testenv.PostgresURL(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	adminURL := os.Getenv("GATEWAY_TEST_POSTGRES_URL")
	if adminURL == "" {
		// The database that testenv created ours from is not ours to
		// close; connect to the server's maintenance database instead.
		a := *u
		a.Path = "/postgres"
		adminURL = a.String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatalf("maintenance connection to PostgreSQL: %v", err)
	}
	db := &postgresDB{url: dbURL, name: name, admin: conn}
	// Registered after testenv's drop, so it runs before it: the database
	// must accept connections again, whatever a phase left behind.
	t.Cleanup(func() {
		if err := db.allowConnections(true); err != nil {
			t.Logf("re-open database %s: %v", name, err)
		}
		conn.Close(context.Background())
	})
	return db
}

func (db *postgresDB) exec(sql string) (int64, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tag, err := db.admin.Exec(ctx, sql)
	return tag.RowsAffected(), err
}

// terminate ends every backend connected to the database and reports how
// many there were.
func (db *postgresDB) terminate() (int, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n int
	err := db.admin.QueryRow(ctx,
		`SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()) AS t`,
		db.name).Scan(&n)
	return n, err
}

func (db *postgresDB) allowConnections(allow bool) error {
	_, err := db.exec("ALTER DATABASE " + pgx.Identifier{db.name}.Sanitize() + " WITH ALLOW_CONNECTIONS " + strconv.FormatBool(allow))
	return err
}

// stop makes the database unreachable for the gateway: no new connections,
// and the open ones terminated.
func (db *postgresDB) stop() error {
	if err := db.allowConnections(false); err != nil {
		return err
	}
	_, err := db.terminate()
	return err
}

// start lets connections in again.
func (db *postgresDB) start() error { return db.allowConnections(true) }
