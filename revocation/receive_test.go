package revocation

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/testenv"
)

// countingConn counts the read deadlines set on a connection: one for
// each read that go-redis starts.
type countingConn struct {
	net.Conn
	reads *atomic.Int64
}

func (c countingConn) SetReadDeadline(t time.Time) error {
	c.reads.Add(1)
	return c.Conn.SetReadDeadline(t)
}

func (c countingConn) SetDeadline(t time.Time) error {
	c.reads.Add(1)
	return c.Conn.SetDeadline(t)
}

// TestKeeperIdleSubscriptionSleeps: a quiet subscription is read until
// its ping is due, not in short reads that wake the gateway each second.
func TestKeeperIdleSubscriptionSleeps(t *testing.T) {
	w := newKeeperWorld(t, false, time.Hour)
	var reads atomic.Int64
	w.keeper.deps.Redis = redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t),
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			return countingConn{Conn: c, reads: &reads}, err
		}})
	t.Cleanup(func() { w.keeper.deps.Redis.Close() })
	w.run(t)
	testenv.WaitFor(t, func() bool { return w.keeper.Stats().Subscribed })
	before := reads.Load()
	time.Sleep(3500 * time.Millisecond)
	if n := reads.Load() - before; n > 1 {
		t.Fatalf("%d reads started on a quiet subscription in 3.5 s; want at most 1 (a ping is due after %v)", n, pingEvery)
	}
}

// TestKeeperStopsWhileReceiving: a read that waits for the next ping does
// not hold the Keeper up when its context ends.
func TestKeeperStopsWhileReceiving(t *testing.T) {
	w := newKeeperWorld(t, true, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.keeper.Run(ctx); close(done) }()
	testenv.WaitFor(t, func() bool { return w.keeper.Stats().Subscribed })
	time.Sleep(100 * time.Millisecond) // the read is under way
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("Run still running 10 s after its context ended (a ping is due after %v)", pingEvery)
	}
}

// TestKeeperFindsASilentSubscription: a subscription whose connection
// stops passing bytes, without closing, is found lost once its ping goes
// unanswered: pingEvery of quiet, then pongWithin.
func TestKeeperFindsASilentSubscription(t *testing.T) {
	w := newKeeperWorld(t, false, time.Hour)
	p := startFreezer(t, testenv.RedisAddr(t))
	w.keeper.deps.Redis = redis.NewClient(&redis.Options{Addr: p.addr, MaxRetries: -1})
	t.Cleanup(func() { w.keeper.deps.Redis.Close() })
	w.keeper.pingEvery, w.keeper.pongWithin = time.Second, 500*time.Millisecond
	w.run(t)
	testenv.WaitFor(t, func() bool { return w.keeper.Stats().Subscribed })
	p.freeze()
	frozen := time.Now()
	deadline := time.Now().Add(30 * time.Second)
	for w.keeper.Stats().Subscribed {
		if time.Now().After(deadline) {
			t.Fatal("a silent subscription still counts as live after 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("silent subscription found %v after it fell silent (ping after %v, answer within %v)",
		time.Since(frozen).Round(time.Millisecond), w.keeper.pingEvery, w.keeper.pongWithin)
}

// freezer forwards TCP connections to a server until it is frozen: then
// it passes no byte, and closes nothing.
type freezer struct {
	addr   string
	mu     sync.Mutex
	frozen bool
}

func startFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	f := &freezer{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); s.Close() })
			go f.pass(s, c)
			go f.pass(c, s)
		}
	}()
	return f
}

func (f *freezer) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frozen = true
}

// pass copies from src to dst while not frozen; frozen, it drops what comes.
func (f *freezer) pass(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		f.mu.Lock()
		frozen := f.frozen
		f.mu.Unlock()
		if !frozen {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
}
