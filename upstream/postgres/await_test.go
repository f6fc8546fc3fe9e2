package postgres

import (
	"context"
	"errors"
	"io"
	"net"
	neturl "net/url"
	"sync"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/upstream"
	"github.com/realty-gateway/gateway/upstream/storetest"
)

// TestAwaitUndoneUnderAShortStatementTimeout: the wait on the server stays
// under the session's statement_timeout, so an idle wait is an answer, not
// a cancelled statement.
func TestAwaitUndoneUnderAShortStatementTimeout(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, testenv.PostgresURL(t), Options{MaxConns: 4, StatementTimeout: 200 * time.Millisecond})
	s = storetest.Opened(t, s, err)
	sess, err := s.Acquire(ctx, "the consumer")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close(context.Background()) })
	if fs, ok := sess.(*feedSession); !ok || fs.longest <= 0 {
		t.Fatalf("session %T waits on the server for at most %v; want a wait on the server", sess, fs.longest)
	}
	if undone, err := sess.AwaitUndone(ctx, time.Second); err != nil || undone {
		t.Fatalf("AwaitUndone(1s) under a 200 ms statement_timeout = %v, %v; want false", undone, err)
	}
}

// TestAwaitUndoneEndsWithItsClient: a consumer that dies while it waits
// on the server (its connections closed, as the kernel closes a dead
// process's) leaves the feed to another at once, not when the wait would
// have ended: the server checks the connection during the wait
// (client_connection_check_interval).
func TestAwaitUndoneEndsWithItsClient(t *testing.T) {
	ctx := context.Background()
	url := testenv.PostgresURL(t)
	p := startProxy(t, url)
	dying, err := Open(ctx, p.url, Options{MaxConns: 4})
	dying = storetest.Opened(t, dying, err)
	sess, err := dying.Acquire(ctx, "the consumer")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = sess.AwaitUndone(ctx, time.Hour) }()
	time.Sleep(300 * time.Millisecond) // the wait is on the server
	p.kill()
	died := time.Now()

	s, err := Open(ctx, url, Options{MaxConns: 4})
	s = storetest.Opened(t, s, err)
	for {
		next, err := s.Acquire(ctx, "the next consumer")
		if err == nil {
			t.Logf("the feed was free %v after its consumer's connections closed", time.Since(died).Round(time.Millisecond))
			_ = next.Close(ctx)
			return
		}
		if !errors.Is(err, upstream.ErrNotConsumer) {
			t.Fatal(err)
		}
		if time.Since(died) > 20*time.Second {
			t.Fatal("the feed is still held 20 s after its consumer's connections closed during a wait of an hour")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// proxy forwards connections to PostgreSQL until kill closes them all,
// and takes no new one after.
type proxy struct {
	url   string
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	u, err := neturl.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	t.Cleanup(p.kill)
	server := u.Host
	u.Host = ln.Addr().String()
	p.url = u.String()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", server)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
	return p
}

func (p *proxy) kill() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}
