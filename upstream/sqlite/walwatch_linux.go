package sqlite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
	"unsafe"
)

// walWatch learns from inotify that the database's write-ahead log (or
// the database file) changed: every commit, by any process, writes the
// log. It watches the directory, so that a log made anew is seen too.
type walWatch struct {
	fd    int
	f     *os.File // fd in Go's poller, for reads with a deadline
	names [2]string
	buf   []byte
}

// newWALWatch watches the directory of wal for writes of wal and of the
// database beside it.
func newWALWatch(wal string) (*walWatch, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	mask := uint32(syscall.IN_MODIFY | syscall.IN_CREATE | syscall.IN_MOVED_TO | syscall.IN_DELETE)
	if _, err := syscall.InotifyAddWatch(fd, filepath.Dir(wal), mask); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("inotify watch: %w", err)
	}
	base := filepath.Base(wal)
	return &walWatch{fd: fd, f: os.NewFile(uintptr(fd), "inotify"),
		names: [2]string{base, base[:len(base)-len("-wal")]},
		buf:   make([]byte, 64*(syscall.SizeofInotifyEvent+syscall.NAME_MAX+1))}, nil
}

// drain reads the events already queued and reports whether one was of
// the log or the database.
func (w *walWatch) drain() bool {
	changed := false
	for {
		n, err := syscall.Read(w.fd, w.buf)
		if err != nil || n <= 0 {
			return changed
		}
		changed = w.relevant(w.buf[:n]) || changed
	}
}

// wait waits up to d for a change, and reports whether one came.
func (w *walWatch) wait(ctx context.Context, d time.Duration) (bool, error) {
	if err := w.f.SetReadDeadline(time.Now().Add(d)); err != nil {
		return false, fmt.Errorf("inotify deadline: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = w.f.SetReadDeadline(time.Now()) })
	defer stop()
	for {
		n, err := w.f.Read(w.buf)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return false, ctx.Err()
		case err != nil:
			return false, fmt.Errorf("inotify read: %w", err)
		case w.relevant(w.buf[:n]):
			return true, nil
		}
	}
}

// relevant reports whether events name the log or the database, or say
// that events were lost.
func (w *walWatch) relevant(events []byte) bool {
	for len(events) >= syscall.SizeofInotifyEvent {
		ev := (*syscall.InotifyEvent)(unsafe.Pointer(&events[0]))
		end := syscall.SizeofInotifyEvent + int(ev.Len)
		if end > len(events) {
			return true // a torn read: take it as a change
		}
		name := string(bytes.TrimRight(events[syscall.SizeofInotifyEvent:end], "\x00"))
		if ev.Mask&(syscall.IN_Q_OVERFLOW|syscall.IN_IGNORED) != 0 || name == w.names[0] || name == w.names[1] {
			return true
		}
		events = events[end:]
	}
	return false
}

// Close ends the watch.
func (w *walWatch) Close() error { return w.f.Close() }
