package feed

import (
	"context"
)

// backfillBatch is how many listings one idle poll gives a body.
const backfillBatch = 200

// backfill keeps the response body of the next listings after id after
// that lack a current one (written before bodies were kept, or by another
// writer whose change was applied before), so that their misses do no
// JSON work. It returns where to go on, -1 once none is left.
func (l *loop) backfill(ctx context.Context, after int64) (int64, error) {
	ids, err := call(ctx, l.s, func(ctx context.Context) ([]int64, error) { return l.s.StaleBodies(ctx, after, backfillBatch) })
	if err == nil && len(ids) > 0 {
		_, err = call(ctx, l.s, func(ctx context.Context) (struct{}, error) { return struct{}{}, l.s.KeepBodies(ctx, ids) })
	}
	if err != nil {
		return after, err
	}
	if len(ids) < backfillBatch {
		l.log.Debug("listing bodies kept", "upTo", after)
		return -1, nil
	}
	return ids[len(ids)-1], nil
}
