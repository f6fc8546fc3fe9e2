package sqlstore

import (
	"context"
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

// Schema is an engine's schema: its steps, from LoadSteps, and where a
// database records how many of them it has. The version functions run in
// the transaction that applies the next step.
type Schema struct {
	Steps []string
	// Version returns how many steps the database has. Where the
	// transaction does not hold the write lock from BEGIN, it first takes a
	// lock that keeps processes migrating at once from applying a step twice.
	Version func(ctx context.Context, tx Querier) (int, error)
	// SetVersion records that the database has v steps.
	SetVersion func(ctx context.Context, tx Querier, v int) error
}

// Migrate applies the steps that the database lacks, each in a transaction
// of its own that also records it, so that a failed step leaves the
// database at the version before it. A database with more steps than this
// build knows is an error: its schema may not be what this build expects.
func Migrate(ctx context.Context, db DB, schema Schema) error {
	for {
		var done bool
		err := inTx(ctx, db, func(tx Querier) (err error) {
			done, err = schema.next(ctx, tx)
			return err
		})
		if err != nil || done {
			return err
		}
	}
}

// next applies the step after the database's version, or reports done when
// there is none.
func (schema Schema) next(ctx context.Context, tx Querier) (done bool, err error) {
	version, err := schema.Version(ctx, tx)
	if err != nil {
		return false, fmt.Errorf("read schema version: %w", err)
	}
	switch {
	case version > len(schema.Steps):
		return false, fmt.Errorf("schema version %d is newer than this build knows (%d)", version, len(schema.Steps))
	case version == len(schema.Steps):
		return true, nil
	}
	if err := tx.Exec(ctx, schema.Steps[version]); err != nil {
		return false, fmt.Errorf("schema step %d: %w", version+1, err)
	}
	if err := schema.SetVersion(ctx, tx, version+1); err != nil {
		return false, fmt.Errorf("schema step %d: record version: %w", version+1, err)
	}
	return false, nil
}
