// Package sqlstore is what the SQL engines of package upstream share:
// loading their numbered migration steps, and the import algorithm, which
// each engine runs over its own transaction through ImportTx.
//
// Concurrency: the functions keep no state of their own. Import runs inside
// the caller's transaction, which must keep other imports out until it ends.
package sqlstore

import (
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// LoadSteps reads the schema steps NNNN_name.sql of dir, which must be
// numbered 1, 2, 3... in order. Applying steps[i] brings a database from
// version i to i+1.
func LoadSteps(fsys fs.FS, dir string) ([]string, error) {
	names, err := fs.Glob(fsys, dir+"/*.sql")
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	steps := make([]string, len(names)) // fs.Glob sorts the names
	for i, name := range names {
		num, _, _ := strings.Cut(path.Base(name), "_")
		if n, err := strconv.Atoi(num); err != nil || n != i+1 {
			return nil, fmt.Errorf("migration %s: want step number %d", name, i+1)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err // names the file
		}
		steps[i] = string(b)
	}
	return steps, nil
}
