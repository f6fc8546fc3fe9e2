package postgres_test

import (
	"context"
	"sync"
	"testing"

	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/upstream"
	"github.com/realty-gateway/gateway/upstream/postgres"
	"github.com/realty-gateway/gateway/upstream/storetest"
)

// open returns a store on a fresh database. Its Close is registered after
// the database's drop, so it runs first.
func open(t *testing.T) upstream.Store {
	t.Helper()
	url := testenv.PostgresURL(t)
	s, err := postgres.Open(context.Background(), url, postgres.Options{MaxConns: 4})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestStore(t *testing.T) {
	storetest.Run(t, open)
}

// TestOpenConcurrently starts several stores on one database at once: the
// advisory lock keeps their migrations from racing.
func TestOpenConcurrently(t *testing.T) {
	url := testenv.PostgresURL(t)
	const stores = 4
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range stores {
		wg.Go(func() {
			s, err := postgres.Open(context.Background(), url, postgres.Options{MaxConns: 1})
			if err == nil {
				err = s.Close()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Errorf("Open: %v", err)
	}
}
