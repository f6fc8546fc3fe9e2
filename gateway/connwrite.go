package gateway

import (
	"errors"
	"net"
	"os"
)

// fasthttp sends a response larger than its write buffer with one writev
// on a *net.TCPConn, and with two writes on any other connection: conn
// keeps a full buffer's write (bufio flushing in the middle of a response)
// and sends it with the next write in one writev, or before the next read
// or the close. A response is one system call, whatever its size.

// writeBufferSize is fasthttp's write buffer (App sets it): a write of
// exactly this size is, but for a response of exactly this size, bufio
// flushing a full buffer with more of the response to come.
const writeBufferSize = 4096

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
