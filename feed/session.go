package feed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

// Run holds the feed whenever no other gateway does, and applies it, until
// ctx ends.
func (c *Consumer) Run(ctx context.Context) {
	var notified bool // the store's failure is logged once, not every try
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, acquireTimeout)
		sess, err := c.deps.Store.Acquire(actx, c.deps.Holder)
		cancel()
		wait := acquireEvery
		switch {
		case err == nil:
			notified = false
			if errors.Is(c.hold(ctx, sess), errRedisGone) {
				wait = redisGiveUp // a gateway that reaches Redis may take the feed meanwhile
			}
		case errors.Is(err, upstream.ErrNotConsumer), ctx.Err() != nil:
		case !notified:
			notified = true
			c.errors[StageStore].Add(1)
			c.log.Warn("change feed not acquired", "err", err)
		default:
			c.errors[StageStore].Add(1)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// hold consumes while sess stands, then gives it up, and returns why.
func (c *Consumer) hold(ctx context.Context, sess upstream.FeedSession) error {
	c.consumer.Store(true)
	c.log.Info("change feed consumer started", "holder", c.deps.Holder)
	err := c.consume(ctx, sess)
	c.consumer.Store(false)
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	closeErr := sess.Close(closeCtx)
	if ctx.Err() != nil {
		err = nil
	}
	c.log.Info("change feed consumer stopped", "holder", c.deps.Holder, "err", errors.Join(err, closeErr))
	return err
}

// session wraps the consumer's hold. Every call is bounded by the lease
// that the last successful one proved, so that nothing is applied once the
// hold may have lapsed. A failed call is retried while the hold can be
// proved (see prove): a store that is slow for a moment, or one timeout,
// does not give the feed up; a store that cannot renew the hold does.
//
// A session is used by one goroutine at a time: the consumer's, or the
// keeper's while the consumer works off the session (see outside).
type session struct {
	upstream.FeedSession
	lastOK time.Time      // when the last successful call began
	failed *atomic.Uint64 // the consumer's count of the store's failures
	log    *slog.Logger
}

func newSession(c *Consumer, fs upstream.FeedSession) *session {
	return &session{FeedSession: fs, lastOK: time.Now(), failed: c.errors[StageStore], log: c.log}
}

// until is how long work may go on before the hold may have lapsed.
func (s *session) until() time.Time { return s.lastOK.Add(s.Lease()) }

// retryCap is the longest wait between two tries.
func (s *session) retryCap() time.Duration { return min(retryMost, s.Lease()/4) }

// call runs one call on the session, bounded by the lease. A failure is
// retried, after a wait and a renewal that proves the hold still stands,
// for up to a lease after the call first failed; it is returned at once
// when the hold is lost (upstream.ErrNotConsumer, or no renewal proves
// it) or ctx ends. A call that fails for a whole lease while the hold
// stands is returned too: the store answers the renewals but not the
// feed's statements, and a fresh session may do better.
func call[T any](ctx context.Context, s *session, f func(context.Context) (T, error)) (T, error) {
	var failedSince time.Time
	for wait, tries := retryFirst, 1; ; wait, tries = min(2*wait, s.retryCap()), tries+1 {
		began := time.Now()
		cctx, cancel := context.WithDeadline(ctx, s.until())
		v, err := f(cctx)
		cancel()
		if err == nil {
			s.lastOK = began
			if tries > 1 {
				s.log.Info("change feed store call recovered", "tries", tries)
			}
			return v, nil
		}
		s.failed.Add(1)
		if ctx.Err() != nil || errors.Is(err, upstream.ErrNotConsumer) {
			return v, err
		}
		if failedSince.IsZero() {
			failedSince = time.Now()
			s.log.Warn("change feed store call failed; retrying while the hold stands", "err", err, "lease", s.Lease().String())
		} else if time.Since(failedSince) >= s.Lease() {
			return v, fmt.Errorf("failing for %v: %w", s.Lease(), err)
		}
		if err := s.prove(ctx, wait, err); err != nil {
			return v, err
		}
	}
}

// prove renews the hold after cause, waiting wait first. While the lease
// holds, each renewal is bounded by it, and a failed one is tried again
// after a longer wait. Once the lease has run out, one more renewal,
// bounded by a quarter lease, decides: the engine's hold may stand past
// its lease (a lock of a database session stands as long as the session,
// a lock of a file as long as the file is open), and only the store can
// tell; nothing is applied meanwhile. It returns nil once the hold is
// proved, or why it is lost.
func (s *session) prove(ctx context.Context, wait time.Duration, cause error) error {
	for {
		sleep(ctx, wait)
		if ctx.Err() != nil {
			return errors.Join(cause, ctx.Err())
		}
		began := time.Now()
		deadline, lapsed := s.until(), !began.Before(s.until())
		if lapsed {
			deadline = began.Add(s.Lease() / 4)
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		err := s.Renew(rctx)
		cancel()
		if err == nil {
			s.lastOK = began
			return nil
		}
		s.failed.Add(1)
		if lapsed || ctx.Err() != nil || errors.Is(err, upstream.ErrNotConsumer) {
			return fmt.Errorf("feed hold lost: %w", errors.Join(cause, err))
		}
		wait = min(2*wait, s.retryCap())
	}
}

// errLeaseLapsed ends the work off the session once the lease ran out
// without a renewal.
var errLeaseLapsed = errors.New("change feed lease lapsed")

// outside runs f, work off the session (Redis, the other gateways' acks),
// while keeping the hold: a keeper renews the session every quarter lease
// meanwhile, as Renew asks, and f's context ends once the lease has run
// out without a renewal, so that nothing is applied past the hold. f must
// not use the session: until f returns, the keeper is its only user.
func (s *session) outside(ctx context.Context, f func(context.Context)) {
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lapse := time.AfterFunc(time.Until(s.until()), func() { cancel(errLeaseLapsed) })
	defer lapse.Stop()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(s.Lease() / 4)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-fctx.Done():
				return
			case <-tick.C:
			}
			began := time.Now()
			rctx, rcancel := context.WithDeadline(fctx, s.until())
			err := s.Renew(rctx)
			rcancel()
			switch {
			case err == nil:
				s.lastOK = began
				lapse.Reset(time.Until(s.until()))
			case errors.Is(err, upstream.ErrNotConsumer):
				s.failed.Add(1)
				cancel(err)
			default:
				s.failed.Add(1) // the lapse ends f unless a later renewal succeeds
			}
		}
	})
	f(fctx)
	close(done)
	wg.Wait()
}
