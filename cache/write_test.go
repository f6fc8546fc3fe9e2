package cache

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/realty-gateway/gateway/upstream"
)

func titleOf(t *testing.T, body []byte) string {
	t.Helper()
	var l upstream.Listing
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return l.Title
}

// TestSlowFillDoesNotOverwriteAnUpdate forces the interleaving: a fill
// reads version 1 and is held; an update publishes version 2; the fill
// then tries to write version 1. Both keys must keep version 2.
func TestSlowFillDoesNotOverwriteAnUpdate(t *testing.T) {
	for _, tt := range cacheKinds(t) {
		t.Run(tt.name, func(t *testing.T) {
			old := listing(9, 3, 5, true)
			old.Title = "old"
			src := newSource(old)
			c := tt.give(src)
			ctx := context.Background()

			gate := make(chan struct{})
			src.gate = gate
			fill := make(chan Entry, 1)
			go func() {
				e, _ := c.Get(ctx, ByID(9))
				fill <- e
			}()
			waitFor(t, func() bool { return src.calls.Load() == 1 }) // the fill has read "old"

			src.mu.Lock()
			src.gate = nil // the update's own reads must not wait
			src.mu.Unlock()
			updated := old
			updated.Title = "new"
			if _, _, err := c.Replace(ctx, updated); err != nil {
				t.Fatal(err)
			}
			close(gate) // the held fill now writes "old", revision 1
			if e := <-fill; titleOf(t, e.Body) != "old" {
				t.Fatalf("the held fill returned %q; the test did not force the interleaving", titleOf(t, e.Body))
			}

			for _, k := range []Key{ByID(9), ByNumber(3, 5)} {
				e, err := c.Get(ctx, k)
				if err != nil {
					t.Fatal(err)
				}
				if got := titleOf(t, e.Body); got != "new" {
					t.Fatalf("read %+v after the update = %q (%v): the slow fill overwrote it", k, got, e.State)
				}
			}
		})
	}
}

func TestWritesPublishBothKeys(t *testing.T) {
	for _, tt := range cacheKinds(t) {
		t.Run(tt.name, func(t *testing.T) {
			src := newSource()
			c := tt.give(src)
			ctx := context.Background()

			// A cached "absent" must not outlive the create.
			if _, err := c.Get(ctx, ByID(4)); !errors.Is(err, upstream.ErrNotFound) {
				t.Fatalf("before create: %v", err)
			}
			l := listing(4, 2, 1, true)
			l.Title = "created"
			if _, e, err := c.Create(ctx, l); err != nil || titleOf(t, e.Body) != "created" {
				t.Fatalf("create: %v", err)
			}
			loads := src.calls.Load()
			for _, k := range []Key{ByID(4), ByNumber(2, 1)} {
				e, err := c.Get(ctx, k)
				if err != nil || e.State != Hit || titleOf(t, e.Body) != "created" {
					t.Fatalf("read %+v after create: %v %v", k, e.State, err)
				}
			}
			if src.calls.Load() != loads {
				t.Fatal("reads after a create went to the store")
			}

			l.Title = "replaced"
			if _, _, err := c.Replace(ctx, l); err != nil {
				t.Fatal(err)
			}
			for _, k := range []Key{ByID(4), ByNumber(2, 1)} {
				e, err := c.Get(ctx, k)
				if err != nil || titleOf(t, e.Body) != "replaced" {
					t.Fatalf("read %+v after replace: %v", k, err)
				}
			}

			if err := c.Delete(ctx, 2, 4); err != nil {
				t.Fatal(err)
			}
			for _, k := range []Key{ByID(4), ByNumber(2, 1)} {
				if _, err := c.Get(ctx, k); !errors.Is(err, upstream.ErrNotFound) {
					t.Fatalf("read %+v after delete: %v, want ErrNotFound", k, err)
				}
			}
		})
	}
}
