package feed

import (
	"context"
	"errors"
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
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	closeErr := sess.Close(closeCtx)
	if ctx.Err() != nil {
		err = nil
	}
	c.log.Info("change feed consumer stopped", "holder", c.deps.Holder, "err", errors.Join(err, closeErr))
	return err
}

// session wraps the consumer's hold: every call bounded by the lease that
// the last successful one proved.
type session struct {
	upstream.FeedSession
	lastOK time.Time // when the last successful call began
}

// until is how long work may go on before the hold may have lapsed.
func (s *session) until() time.Time { return s.lastOK.Add(s.Lease()) }

// call runs one call on the session, bounded by the lease.
func call[T any](ctx context.Context, s *session, f func(context.Context) (T, error)) (T, error) {
	began := time.Now()
	ctx, cancel := context.WithDeadline(ctx, s.until())
	defer cancel()
	v, err := f(ctx)
	if err == nil {
		s.lastOK = began
	}
	return v, err
}
