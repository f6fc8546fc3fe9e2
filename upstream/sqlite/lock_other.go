//go:build !unix

package sqlite

import (
	"errors"
	"os"
)

// tryLock needs flock: elsewhere no gateway consumes the embedded store's
// change feed.
func tryLock(string) (*os.File, error) { return nil, errors.ErrUnsupported }
