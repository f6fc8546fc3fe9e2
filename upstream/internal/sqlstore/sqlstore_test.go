package sqlstore

import (
	"slices"
	"testing"
	"testing/fstest"
)

func TestLoadSteps(t *testing.T) {
	fsys := fstest.MapFS{
		"m/0002_b.sql": {Data: []byte("two")},
		"m/0001_a.sql": {Data: []byte("one")},
		"m/README":     {Data: []byte("not a step")},
	}
	steps, err := LoadSteps(fsys, "m")
	if err != nil || !slices.Equal(steps, []string{"one", "two"}) {
		t.Fatalf("LoadSteps = %q, %v; want [one two]", steps, err)
	}

	delete(fsys, "m/0001_a.sql")
	if steps, err := LoadSteps(fsys, "m"); err == nil {
		t.Fatalf("LoadSteps with a gap = %q; want an error", steps)
	}
}
