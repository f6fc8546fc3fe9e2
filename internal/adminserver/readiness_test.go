package adminserver

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

func TestReadiness(t *testing.T) {
	down := errors.New("down")
	ping := func(err error) func(context.Context) error { return func(context.Context) error { return err } }
	tests := []struct {
		name         string
		draining     bool
		storeSuspect bool
		store, cache error
		noRedis      bool
		warming      bool
		want         string
	}{
		{name: "all well", want: ""},
		{name: "warming up", warming: true, want: "warming up: Redis not yet vouched for by the change feed"},
		{name: "draining while warming up", warming: true, draining: true, want: "shutting down"},
		{name: "draining", draining: true, want: "shutting down"},
		{name: "breaker closed, nothing asked", store: down, cache: down, want: ""},
		{name: "breaker open, the store answers again", storeSuspect: true, cache: down, want: ""},
		{name: "store down, cache answers: serves cached and stale", storeSuspect: true, store: down, want: ""},
		{name: "store and cache down", storeSuspect: true, store: down, cache: down, want: "store and cache both failing"},
		{name: "store down, no Redis: the in-process cache is all there is", storeSuspect: true, store: down, noRedis: true, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var draining atomic.Bool
			draining.Store(tt.draining)
			r := Readiness{draining: &draining, warming: func() bool { return tt.warming },
				storeSuspect: func() bool { return tt.storeSuspect }, pingStore: ping(tt.store), pingCache: ping(tt.cache)}
			if tt.noRedis {
				r.pingCache = nil
			}
			if got := r.Check(context.Background()); got != tt.want {
				t.Errorf("Check() = %q, want %q", got, tt.want)
			}
		})
	}
}
