package main

import (
	"io"
	"net"
	"sync/atomic"
	"time"
)

// delayProxy forwards TCP connections to a target (PostgreSQL), holding
// back each chunk from the target by the current delay, counted from when
// the chunk was read, so that a connection's throughput stays: a store
// that answers every query that much later. It is the bench's own, since
// internal/faultproxy's Proxy belongs to a test; it has its latency alone.
type delayProxy struct {
	target string
	ln     net.Listener
	delay  atomic.Int64 // nanoseconds
}

// newDelayProxy listens on a free 127.0.0.1 port and forwards to target
// until Close; the delay starts at zero.
func newDelayProxy(target string) (*delayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{target: target, ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.pipe(c)
		}
	}()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *delayProxy) Addr() string { return p.ln.Addr().String() }

// SetDelay sets the delay of every chunk from the target from now on, on
// open connections too.
func (p *delayProxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Close stops accepting; open connections end with their clients.
func (p *delayProxy) Close() error { return p.ln.Close() }

func (p *delayProxy) pipe(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		c.Close()
		return
	}
	go func() {
		_, _ = io.Copy(up, c)
		up.Close()
		c.Close()
	}()
	p.delayed(c, up)
}

// delayed forwards src to dst, each chunk once its delay has passed,
// until either side ends; then it closes both.
func (p *delayProxy) delayed(dst, src net.Conn) {
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
				chunks <- chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(time.Duration(p.delay.Load()))}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range chunks {
		time.Sleep(time.Until(ch.due))
		if _, err := dst.Write(ch.b); err != nil {
			src.Close() // ends the reader, which closes chunks
			for range chunks {
			}
			return
		}
	}
}
