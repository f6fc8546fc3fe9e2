package gateway

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Listener wraps the public listener. Its connections move their
// deadlines lazily, and remember the last token verified on them.
//
// fasthttp sets three deadlines per request on a keep-alive connection
// (the idle timeout, the read timeout once the request starts, the write
// timeout), and each one costs two clock reads and a timer update in the
// runtime: a few percent of a cached view. Here a deadline that moves
// later is only recorded; the connection's timer stays at the earlier time
// and, when it fires, a read or write that timed out before the recorded
// deadline is resumed under it. A deadline that moves earlier, or a first
// one, is set at once. Every read and write thus ends exactly when the last
// deadline asked for says, as without the wrapper; a connection's timer is
// moved about twice per read timeout instead of three times per request.
//
// A client sends the same Authorization header on every request of a
// connection: the token check finds it on the connection (see
// Server.remembered) before it looks in the shared memory of verified
// tokens.
//
// fasthttp sends a response larger than its write buffer with one writev
// on a *net.TCPConn, and with two writes on any other connection: this one
// keeps a full buffer's write (bufio flushing in the middle of a response)
// and sends it with the next write in one writev, or before the next read
// or the close. A response is one system call, whatever its size.
func Listener(ln net.Listener) net.Listener { return listener{ln} }

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c}, nil
}

// conn is a public connection. Its mutex orders the deadline changes,
// which fasthttp makes from the connection's goroutine and a handler may
// make from another.
type conn struct {
	net.Conn
	mu          sync.Mutex
	read, write deadline
	// token is the last token verified on the connection: checked again
	// (header, expiry, revocations) on every use, as one from the shared
	// memory is.
	token atomic.Pointer[verifiedToken]
	// held is a write of a full write buffer, reported written and not
	// yet sent (see Write); heldMu guards it (a close may come from
	// another goroutine), hasHeld says whether it holds any.
	heldMu  sync.Mutex
	held    []byte
	hasHeld atomic.Bool
}

// writeBufferSize is fasthttp's write buffer (App sets it): a write of
// exactly this size is, but for a response of exactly this size, bufio
// flushing a full buffer with more of the response to come.
const writeBufferSize = 4096

// deadline is one direction's deadline: as last asked for, and as set on
// the connection. The zero time is no deadline.
type deadline struct {
	want, armed time.Time
}

// set records t, and sets it on the connection unless the deadline there
// fires no later than t (then resume moves it if it fires).
func (d *deadline) set(t time.Time, arm func(time.Time) error) error {
	d.want = t
	if !d.armed.IsZero() && (t.IsZero() || !t.Before(d.armed)) {
		return nil
	}
	if err := arm(t); err != nil {
		return err
	}
	d.armed = t
	return nil
}

// resume reports whether an operation that timed out may go on: the
// deadline asked for has not passed (it was later than the one set on the
// connection, or none), and is now set there.
func (d *deadline) resume(arm func(time.Time) error) bool {
	if !d.want.IsZero() && !time.Now().Before(d.want) {
		return false // the deadline asked for has passed
	}
	if !d.armed.Equal(d.want) {
		if err := arm(d.want); err != nil {
			return false
		}
		d.armed = d.want
	}
	return true
}

func (c *conn) Read(b []byte) (int, error) {
	if c.hasHeld.Load() {
		if _, err := c.sendHeld(nil); err != nil {
			return 0, err
		}
	}
	for {
		n, err := c.Conn.Read(b)
		if n > 0 || err == nil || !errors.Is(err, os.ErrDeadlineExceeded) || !c.resume(&c.read, c.Conn.SetReadDeadline) {
			return n, err
		}
	}
}

// Write sends b, but for a write of a full buffer (bufio flushing in the
// middle of a response), which is held and goes with the next write in one
// writev, or before the next read or the close.
func (c *conn) Write(b []byte) (int, error) {
	if c.hasHeld.Load() {
		return c.sendHeld(b)
	}
	if len(b) == writeBufferSize {
		c.heldMu.Lock()
		c.held = append(c.held[:0], b...) // bufio reuses b
		c.hasHeld.Store(true)
		c.heldMu.Unlock()
		return len(b), nil
	}
	return c.writeAll(b)
}

// writeAll sends b, resuming under a later write deadline.
func (c *conn) writeAll(b []byte) (int, error) {
	n := 0
	for {
		m, err := c.Conn.Write(b[n:])
		n += m
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) || !c.resume(&c.write, c.Conn.SetWriteDeadline) {
			return n, err
		}
	}
}

// sendHeld sends the held write and b after it, in one writev on a TCP
// connection, and returns how much of b went.
func (c *conn) sendHeld(b []byte) (int, error) {
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	if !c.hasHeld.Load() { // a close sent it meanwhile
		return c.writeAll(b)
	}
	defer func() { c.held, _ = c.held[:0], c.hasHeld.Swap(false) }()
	bufs := net.Buffers{c.held, b}
	var sent int64
	for {
		m, err := bufs.WriteTo(c.Conn)
		sent += m
		if err == nil {
			return len(b), nil
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) || !c.resume(&c.write, c.Conn.SetWriteDeadline) {
			return max(0, int(sent)-len(c.held)), err
		}
	}
}

// Close sends a held write first: it was reported written.
func (c *conn) Close() error {
	var err error
	if c.hasHeld.Load() {
		_, err = c.sendHeld(nil)
	}
	return errors.Join(err, c.Conn.Close())
}

func (c *conn) resume(d *deadline, arm func(time.Time) error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return d.resume(arm)
}

func (c *conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.read.set(t, c.Conn.SetReadDeadline)
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.write.set(t, c.Conn.SetWriteDeadline)
}

func (c *conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return errors.Join(c.read.set(t, c.Conn.SetReadDeadline), c.write.set(t, c.Conn.SetWriteDeadline))
}
