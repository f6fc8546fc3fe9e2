//go:build !linux

package sqlite

import (
	"context"
	"os"
	"time"
)

// walPollEvery is how often the portable watch looks at the log.
const walPollEvery = 100 * time.Millisecond

// walWatch, without inotify, looks at the write-ahead log's size and
// modification time every walPollEvery: every commit, by any process,
// writes the log.
type walWatch struct {
	wal  string
	last walState
}

type walState struct {
	size    int64
	modTime int64
}

func newWALWatch(wal string) (*walWatch, error) { return &walWatch{wal: wal}, nil }

// drain reports whether the log changed since it was last looked at.
func (w *walWatch) drain() bool {
	var st walState
	if fi, err := os.Stat(w.wal); err == nil {
		st = walState{size: fi.Size(), modTime: fi.ModTime().UnixNano()}
	}
	changed := st != w.last
	w.last = st
	return changed
}

// wait waits up to d for a change, and reports whether one came.
func (w *walWatch) wait(ctx context.Context, d time.Duration) (bool, error) {
	t := time.NewTicker(walPollEvery)
	defer t.Stop()
	deadline := time.After(d)
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-deadline:
			return false, nil
		case <-t.C:
			if w.drain() {
				return true, nil
			}
		}
	}
}

func (w *walWatch) Close() error { return nil }
