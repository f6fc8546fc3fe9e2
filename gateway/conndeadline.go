package gateway

import (
	"errors"
	"time"
)

// fasthttp sets three deadlines per request on a keep-alive connection
// (the idle timeout, the read timeout once the request starts, the write
// timeout), each costing two clock reads and a timer update. Here a
// deadline that moves later is only recorded; the connection's timer
// stays at the earlier time and, when it fires, a read or write that
// timed out before the recorded deadline is resumed under it. A deadline
// that moves earlier, or a first one, is set at once. Every read and write
// thus ends exactly when the last deadline asked for says; the timer moves
// about twice per read timeout instead of three times per request.

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
