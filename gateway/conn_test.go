package gateway

import (
	"bufio"
	"errors"
	"hash/maphash"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/realty-gateway/gateway/upstream"
)

// lazyPair returns the two ends of a loopback TCP connection: the server's
// accepted through Listener, the client's plain.
func lazyPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = Listener(ln).Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// writeAfter writes b to c after d, on its own goroutine.
func writeAfter(c net.Conn, d time.Duration, b []byte) {
	go func() {
		time.Sleep(d)
		_, _ = c.Write(b)
	}()
}

func TestLazyDeadlineMovedLaterHolds(t *testing.T) {
	server, client := lazyPair(t)
	if err := server.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	// Later: recorded, while the connection's timer stays at 50 ms.
	if err := server.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	writeAfter(client, 300*time.Millisecond, []byte("x"))
	b := make([]byte, 1)
	if n, err := server.Read(b); n != 1 || err != nil {
		t.Fatalf("Read = %d, %v; want the byte sent at 300 ms, under the minute's deadline", n, err)
	}
}

func TestLazyDeadlineEndsWhenAsked(t *testing.T) {
	tests := []struct {
		name   string
		first  time.Duration
		second time.Duration // the deadline in force
	}{
		{"moved later", 50 * time.Millisecond, 300 * time.Millisecond},
		{"moved earlier", time.Hour, 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server, _ := lazyPair(t)
			began := time.Now()
			_ = server.SetReadDeadline(began.Add(tt.first))
			_ = server.SetReadDeadline(began.Add(tt.second))
			_, err := server.Read(make([]byte, 1))
			took := time.Since(began)
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("Read error = %v; want os.ErrDeadlineExceeded", err)
			}
			if took < tt.second || took > 20*time.Second {
				t.Errorf("Read ended after %v; want at the deadline in force, %v", took, tt.second)
			}
		})
	}
}

func TestLazyDeadlineCleared(t *testing.T) {
	server, client := lazyPair(t)
	_ = server.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_ = server.SetReadDeadline(time.Time{})
	writeAfter(client, 300*time.Millisecond, []byte("x"))
	if n, err := server.Read(make([]byte, 1)); n != 1 || err != nil {
		t.Fatalf("Read = %d, %v; want the byte sent at 300 ms, with no deadline", n, err)
	}
}

func TestLazyWriteDeadlineMovedLaterHolds(t *testing.T) {
	server, client := lazyPair(t)
	_ = server.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	_ = server.SetWriteDeadline(time.Now().Add(time.Minute))
	// More than the sockets' buffers hold, read only after the first
	// deadline: the write blocks past it.
	want := make([]byte, 64<<20)
	for i := range want {
		want[i] = byte(i % 251)
	}
	got := make(chan []byte, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		b, _ := io.ReadAll(io.LimitReader(client, int64(len(want))))
		got <- b
	}()
	if n, err := server.Write(want); n != len(want) || err != nil {
		t.Fatalf("Write = %d, %v; want all %d bytes under the minute's deadline", n, err, len(want))
	}
	if b := <-got; string(b) != string(want) {
		t.Fatalf("the reader got %d bytes, not the %d written in order", len(b), len(want))
	}
}

// countingConn counts the deadlines set on it.
type countingConn struct {
	net.Conn
	sets atomic.Int64
}

func (c *countingConn) SetReadDeadline(t time.Time) error {
	c.sets.Add(1)
	return c.Conn.SetReadDeadline(t)
}

func (c *countingConn) SetWriteDeadline(t time.Time) error {
	c.sets.Add(1)
	return c.Conn.SetWriteDeadline(t)
}

// TestLazyDeadlinesSetFewTimers: fasthttp's three deadlines per request on
// a keep-alive connection (idle, read, write) reach the connection three
// times in all, not three times a request.
func TestLazyDeadlinesSetFewTimers(t *testing.T) {
	server, _ := lazyPair(t)
	counted := &countingConn{Conn: server.(*conn).Conn}
	server.(*conn).Conn = counted
	for range 1000 {
		now := time.Now()
		_ = server.SetReadDeadline(now.Add(time.Minute))
		_ = server.SetReadDeadline(now.Add(5 * time.Second))
		_ = server.SetWriteDeadline(now.Add(10 * time.Second))
	}
	if got := counted.sets.Load(); got != 3 {
		t.Errorf("the connection's deadlines were set %d times over 1,000 requests; want 3", got)
	}
}

// TestServerTimeoutsThroughListener serves the app as serve does and
// checks fasthttp's timeouts: a keep-alive connection used for longer than
// the read and idle timeouts stays open, a request sent too slowly and an
// idle connection are closed, and neither before its timeout.
func TestServerTimeoutsThroughListener(t *testing.T) {
	// The keep-alive client below pauses half the read timeout between
	// requests: the rest of the idle timeout, 1.5 s, is a busy machine's
	// headroom.
	const readTimeout, idleTimeout = time.Second, 2 * time.Second
	f := newFixtureWith(t, func(c *Config) { c.ReadTimeout, c.IdleTimeout = readTimeout, idleTimeout }, NoPurge{})
	addr := serveThroughListener(t, f)
	auth := bearer(t, 1, 1)
	dial := func(t *testing.T) (net.Conn, *bufio.Reader) {
		t.Helper()
		c := dialGateway(t, addr)
		return c, bufio.NewReader(c)
	}
	get := func(t *testing.T, c net.Conn, r *bufio.Reader) {
		t.Helper()
		if _, err := io.WriteString(c, "GET /realty/1 HTTP/1.1\r\nHost: gw\r\nAuthorization: "+auth+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	// closedAfter waits for the server to close c and returns how long
	// that took from began.
	closedAfter := func(t *testing.T, c net.Conn, r *bufio.Reader, began time.Time) time.Duration {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, _ = io.Copy(io.Discard, r) // a 408 answer, if any, then the end
		if took := time.Since(began); took < 20*time.Second {
			return took
		}
		t.Fatal("the server did not close the connection within 20 s")
		return 0
	}

	t.Run("keep-alive longer than both timeouts", func(t *testing.T) {
		c, r := dial(t)
		began := time.Now()
		for time.Since(began) < 3*idleTimeout {
			get(t, c, r)
			time.Sleep(readTimeout / 2)
		}
	})
	t.Run("request sent too slowly", func(t *testing.T) {
		c, r := dial(t)
		get(t, c, r) // the next request runs under the read timeout once it starts
		began := time.Now()
		if _, err := io.WriteString(c, "GET /realty/1 HTTP/1.1\r\nHost: gw\r\n"); err != nil {
			t.Fatal(err)
		}
		if took := closedAfter(t, c, r, began); took < readTimeout {
			t.Errorf("closed after %v; want the read timeout, %v", took, readTimeout)
		}
	})
	t.Run("idle connection", func(t *testing.T) {
		c, r := dial(t)
		began := time.Now() // the idle time starts once the answer is written
		get(t, c, r)
		if took := closedAfter(t, c, r, began); took < idleTimeout {
			t.Errorf("closed after %v; want the idle timeout, %v", took, idleTimeout)
		}
	})
}

// TestConnectionRemembersItsToken: a token found in the shared memory of
// verified tokens is remembered by the connection, which answers for it
// once the shared memory forgot it, and for no other header.
func TestConnectionRemembersItsToken(t *testing.T) {
	f := newFixture(t)
	server, _ := lazyPair(t)
	var fctx fasthttp.RequestCtx
	fctx.Init2(server, nil, false)
	c := f.app.AcquireCtx(&fctx)
	defer f.app.ReleaseCtx(c)
	v := &verifiedToken{header: "Bearer a"}
	f.srv.verified.Set(maphash.Bytes(f.srv.tokenSeed, []byte(v.header)), v)
	if got := f.srv.remembered(c, []byte("Bearer a")); got != v {
		t.Fatalf("remembered = %p; want the shared memory's %p", got, v)
	}
	f.srv.verified.InvalidateAll()
	if got := f.srv.remembered(c, []byte("Bearer a")); got != v {
		t.Fatalf("remembered = %p once the shared memory forgot it; want the connection's %p", got, v)
	}
	if got := f.srv.remembered(c, []byte("Bearer b")); got != nil {
		t.Fatalf("remembered another header: %p", got)
	}
}

// TestConnectionTokenIsCheckedOnEveryUse serves the app as serve does: on
// one keep-alive connection, the remembered token is refused once revoked,
// a forged token after a good one is refused, and each token read answers
// as its own principal.
func TestConnectionTokenIsCheckedOnEveryUse(t *testing.T) {
	f := newFixture(t)
	c := dialGateway(t, serveThroughListener(t, f))
	r := bufio.NewReader(c)
	status := func(path, auth string) int {
		t.Helper()
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: gw\r\nAuthorization: "+auth+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	owner, otherFirm, revoked := bearer(t, 1, 2), bearer(t, 2, 3), bearer(t, 1, 1)
	forged := owner[:len(owner)-4] + "AAAA" // another signature
	steps := []struct {
		name, path, auth string
		want             int
	}{
		{"firm 1's user reads its passive listing", "/realty/2", owner, http.StatusOK},
		{"the same again", "/realty/2", owner, http.StatusOK},
		{"a forged token after it", "/realty/2", forged, http.StatusUnauthorized},
		{"firm 2's user after it: not the owner", "/realty/2", otherFirm, http.StatusNotFound},
		{"the owner again", "/realty/2", owner, http.StatusOK},
		{"a token of user 1", "/realty/1", revoked, http.StatusOK},
		{"user 1 revoked: the remembered token is refused", "/realty/1", revoked, http.StatusUnauthorized},
	}
	for _, s := range steps {
		if s.auth == revoked && s.want == http.StatusUnauthorized {
			f.revoked.Add(upstream.Revocation{FirmID: 1, UserID: 1, At: time.Now()})
		}
		if got := status(s.path, s.auth); got != s.want {
			t.Fatalf("%s: status %d; want %d", s.name, got, s.want)
		}
	}
}

// readN reads n bytes from c within 10 s.
func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return b
}

// fullBuffer is a write the size of fasthttp's write buffer: bufio
// flushing a full buffer.
func fullBuffer() []byte {
	b := make([]byte, writeBufferSize)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

func TestHeldWriteGoesWithTheNextWrite(t *testing.T) {
	server, client := lazyPair(t)
	head := fullBuffer()
	if n, err := server.Write(head); n != len(head) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if n, err := server.Write([]byte("tail")); n != 4 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if got := readN(t, client, len(head)+4); string(got) != string(head)+"tail" {
		t.Fatal("the peer got other bytes than the two writes in order")
	}
}

// TestHeldWriteGoesBeforeARead: a response of exactly a full buffer is
// sent when the server turns to read the next request.
func TestHeldWriteGoesBeforeARead(t *testing.T) {
	server, client := lazyPair(t)
	head := fullBuffer()
	_, _ = server.Write(head)
	read := make(chan error, 1)
	go func() {
		_, err := server.Read(make([]byte, 1))
		read <- err
	}()
	if got := readN(t, client, len(head)); string(got) != string(head) {
		t.Fatal("the peer got other bytes than the write")
	}
	_, _ = client.Write([]byte("x"))
	if err := <-read; err != nil {
		t.Fatal(err)
	}
}

func TestHeldWriteGoesBeforeTheClose(t *testing.T) {
	server, client := lazyPair(t)
	head := fullBuffer()
	_, _ = server.Write(head)
	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := io.ReadAll(client); err != nil || string(got) != string(head) {
		t.Fatalf("the peer got %d bytes (%v); want the %d written before the close", len(got), err, len(head))
	}
}

// TestLargeResponseThroughListener: a response larger than the write
// buffer (the API description) arrives whole, twice on one connection.
func TestLargeResponseThroughListener(t *testing.T) {
	f := newFixture(t)
	c := dialGateway(t, serveThroughListener(t, f))
	r := bufio.NewReader(c)
	for range 2 {
		if _, err := io.WriteString(c, "GET /openapi.yaml HTTP/1.1\r\nHost: gw\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || string(body) != string(openAPIYAML) {
			t.Fatalf("status %d, %d bytes (%v); want the %d-byte API description", resp.StatusCode, len(body), err, len(openAPIYAML))
		}
	}
}

// serveThroughListener serves f's app as serve does, through Listener, and
// returns its address.
func serveThroughListener(t *testing.T, f fixture) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = f.app.Listener(Listener(ln)) }()
	t.Cleanup(func() { _ = f.app.Shutdown() })
	return ln.Addr().String()
}

// dialGateway opens a connection to addr, closed when the test ends.
func dialGateway(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
