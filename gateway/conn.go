package gateway

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
)

// Listener wraps the public listener. Its connections move their
// deadlines lazily (conndeadline.go), send a response in one system call
// (connwrite.go), and remember the last token verified on them: a client
// sends the same Authorization header on every request of a connection,
// and the token check finds it there (Server.remembered) before it looks
// in the shared memory of verified tokens (tokenmemo.go).
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

// Close sends a held write first: it was reported written.
func (c *conn) Close() error {
	var err error
	if c.hasHeld.Load() {
		_, err = c.sendHeld(nil)
	}
	return errors.Join(err, c.Conn.Close())
}
