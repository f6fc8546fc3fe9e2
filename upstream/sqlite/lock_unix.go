//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/realty-gateway/gateway/upstream"
)

// tryLock opens path, creating it, and takes an exclusive flock on it
// without waiting; while another open file holds it (in this process or
// another), it returns upstream.ErrNotConsumer. Closing the file releases
// the lock, as the process's death does.
func tryLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	switch {
	case err == nil:
		return f, nil
	case errors.Is(err, syscall.EWOULDBLOCK):
		err = upstream.ErrNotConsumer
	default:
		err = fmt.Errorf("flock %s: %w", path, err)
	}
	return nil, errors.Join(err, f.Close())
}
