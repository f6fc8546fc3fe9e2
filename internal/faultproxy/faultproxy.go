// Package faultproxy forwards TCP connections to a dependency that a test
// can take away, bring back, slow down or silence, so that tests of any
// package can put a real Redis or PostgreSQL behind faults. It imports
// nothing of the gateway's, so the packages it tests can use it. A Proxy
// belongs to the test that created it and is shut down in its Cleanup
// (New), or to a tool that stops it itself (Listen).
//
// Concurrency: a *Proxy's methods are safe for concurrent use.
package faultproxy

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards TCP connections to a target: a dependency that a test can
// take away (Stop), bring back on the same address (Restart), slow down
// (SetLatency) or silence (Freeze). When the target refuses a connection,
// the proxy resets the client's connection, so the client sees the
// target's outage.
type Proxy struct {
	target  string
	addr    string
	latency atomic.Int64 // nanoseconds added to each chunk from the target
	frozen  atomic.Bool

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
}

// New listens on a free 127.0.0.1 port and forwards to target until
// the test ends.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := Listen(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// Listen is New for a caller that is not a test (deploy/bench): it
// forwards until Stop.
func Listen(target string) (*Proxy, error) {
	p := &Proxy{target: target, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	return p, nil
}

// Addr is the proxy's host:port; it stays the same across Restart.
func (p *Proxy) Addr() string { return p.addr }

// SetLatency delays every chunk forwarded from the target to the client by
// d from the moment it was read, without reducing throughput: a dependency
// that answers d later. Zero turns it off. It applies to open connections
// at once.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Freeze stops passing bytes either way, on open connections and new
// ones, without closing any: a silent partition, which neither side can
// tell from a slow peer. Thaw passes what was held back and goes on.
func (p *Proxy) Freeze() { p.frozen.Store(true) }

// Thaw ends a Freeze.
func (p *Proxy) Thaw() { p.frozen.Store(false) }

// Stop refuses new connections and cuts the open ones.
func (p *Proxy) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Restart listens again on the same address after Stop.
func (p *Proxy) Restart() error {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.serve(ln)
	return nil
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.pipe(c)
		}
	}()
}

// track registers open connections so that Stop can cut them; it reports
// false when the proxy has been stopped meanwhile.
func (p *Proxy) track(ln net.Listener, cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != ln || p.ln == nil {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

func (p *Proxy) pipe(c net.Conn) {
	p.mu.Lock()
	ln := p.ln
	p.mu.Unlock()
	up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // reset, as a refused connection would
		}
		c.Close()
		return
	}
	if !p.track(ln, c, up) {
		c.Close()
		up.Close()
		return
	}
	defer p.untrack(c, up)
	done := make(chan struct{})
	go func() {
		p.copy(up, c, false)
		close(done)
	}()
	p.copy(c, up, true)
	<-done
}

// copy forwards src to dst until either side ends, then closes both.
// Chunks from the target are held back by the current latency.
func (p *Proxy) copy(dst, src net.Conn, fromTarget bool) {
	defer dst.Close()
	defer src.Close()
	type chunk struct {
		b   []byte
		due time.Time
	}
	chunks := make(chan chunk, 256)
	go func() {
		defer close(chunks)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				var due time.Time
				if fromTarget {
					due = time.Now().Add(time.Duration(p.latency.Load()))
				}
				chunks <- chunk{b: append([]byte(nil), buf[:n]...), due: due}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range chunks {
		if d := time.Until(ch.due); d > 0 {
			time.Sleep(d)
		}
		for p.frozen.Load() {
			time.Sleep(10 * time.Millisecond)
		}
		if _, err := dst.Write(ch.b); err != nil {
			src.Close() // ends the reader, which closes chunks
			for range chunks {
			}
			return
		}
	}
}
