package cache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Invalidation names a listing version that replaced every older one.
type Invalidation struct {
	ID, FirmID, No int64
	Revision       int64
}

// invalidator announces writes to every gateway sharing the Redis, and
// applies theirs to this gateway's front tier. Each gateway subscribes to
// one events channel and its own acks channel. A write publishes its
// listings' keys and revisions on the events channel, learns from PUBLISH
// how many gateways received it, and waits, at most wait, for as many
// acknowledgements: each gateway acknowledges after it has dropped the
// entries. A gateway whose subscription fails or falls silent empties its
// front tier at once and serves from Redis until it has subscribed again.
type invalidator struct {
	rdb     redis.UniversalClient
	events  string
	acks    string
	filled  string // where lease holders announce their fills (lease.go)
	id      string
	seq     atomic.Uint64
	wait    time.Duration
	timeout time.Duration // one Redis operation
	apply   func([]Invalidation)
	lost    func() // told when the subscription ends: announcements may be missed
	front   *front // nil: this gateway keeps no front tier
	log     *slog.Logger

	mu      sync.Mutex
	waiting map[string]chan struct{}
	fills   map[string]chan struct{} // closed when the key's fill is announced

	subscribed     chan struct{} // closed at the first confirmed subscription
	subscribedOnce sync.Once
	live           atomic.Bool // a confirmed subscription is being listened to

	announced, unacknowledged atomic.Uint64

	// receive is ps.ReceiveTimeout; a test stands in a starved process.
	receive func(ctx context.Context, ps *redis.PubSub, d time.Duration) (any, error)
}

// healthEvery is how often a quiet subscription is pinged while the front
// tier holds entries (an entry it serves must not miss an invalidation),
// and idleHealthEvery how often otherwise; a ping not answered within two
// healthEvery, nor found by one more read, ends the subscription as lost.
const (
	healthEvery     = 500 * time.Millisecond
	idleHealthEvery = 30 * time.Second
	// confirmWait bounds the last read before a silent subscription is
	// called lost: a process starved of CPU wakes past its deadlines while
	// the answer to its ping waits in the socket, and this read finds it.
	confirmWait = 100 * time.Millisecond
)

// invalidatorDeps are what an invalidator is built on; the fields it
// shares with invalidator mean what they mean there.
type invalidatorDeps struct {
	rdb           redis.UniversalClient
	prefix        string // of the channels' names
	wait, timeout time.Duration
	front         *front
	apply         func([]Invalidation)
	lost          func()
	log           *slog.Logger
}

func newInvalidator(d invalidatorDeps) *invalidator {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand does not fail
	id := hex.EncodeToString(b)
	return &invalidator{
		rdb: d.rdb, events: d.prefix + "realty:invalidate", acks: d.prefix + "realty:ack:" + id, id: id,
		filled: d.prefix + "realty:filled", fills: map[string]chan struct{}{},
		wait: d.wait, timeout: d.timeout, apply: d.apply, lost: d.lost, front: d.front, log: d.log,
		waiting: map[string]chan struct{}{}, subscribed: make(chan struct{}),
		receive: func(ctx context.Context, ps *redis.PubSub, d time.Duration) (any, error) {
			return ps.ReceiveTimeout(ctx, d)
		},
	}
}

// run keeps the subscription until ctx ends.
func (inv *invalidator) run(ctx context.Context) {
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		ps := inv.rdb.Subscribe(ctx, inv.events, inv.acks, inv.filled)
		subscribed, err := inv.listen(ctx, ps)
		_ = ps.Close()
		if inv.front != nil {
			inv.front.disable()
		}
		inv.lost()
		if ctx.Err() != nil {
			return
		}
		if subscribed { // the transition is logged, not every retry
			backoff = 50 * time.Millisecond
			inv.log.Warn("invalidation subscription lost; the local tier is off until it is back", "err", err)
		} else {
			inv.log.Debug("invalidation subscription failed", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// listen handles messages until the subscription fails or falls silent,
// and says whether it was confirmed meanwhile.
func (inv *invalidator) listen(ctx context.Context, ps *redis.PubSub) (subscribed bool, err error) {
	defer inv.live.Store(false)
	heard := time.Now()
	var pinged time.Time // when the ping not answered yet went out
	suspect := false     // the ping is overdue: one more read decides
	for ctx.Err() == nil {
		// go-redis does not end a blocked read when ctx ends, so reads
		// are short and ctx is checked between them.
		wait := healthEvery
		if suspect {
			wait = confirmWait
		}
		msg, err := inv.receive(ctx, ps, wait)
		if err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				return subscribed, err
			}
			now := time.Now()
			switch {
			case suspect:
				return subscribed, errors.New("subscription silent")
			case !pinged.IsZero():
				suspect = now.Sub(pinged) > 2*healthEvery
			case inv.front != nil && inv.front.holds(now), now.Sub(heard) >= idleHealthEvery:
				if err := ps.Ping(ctx); err != nil {
					return subscribed, err
				}
				pinged = now
			}
			continue
		}
		heard, pinged, suspect = time.Now(), time.Time{}, false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" && m.Count == 3 {
				subscribed = true
				inv.live.Store(true)
				if inv.front != nil {
					inv.front.enable()
				}
				inv.subscribedOnce.Do(func() { close(inv.subscribed) })
			}
		case *redis.Message:
			switch m.Channel {
			case inv.acks:
				inv.acknowledged(m.Payload)
				continue
			case inv.filled:
				inv.fillAnnounced(m.Payload)
				continue
			}
			inv.handle(ctx, m.Payload)
		}
	}
	return subscribed, ctx.Err()
}

// watchFill returns a channel closed when a fill of name is announced,
// and the function that stops watching.
func (inv *invalidator) watchFill(name string) (<-chan struct{}, func()) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	ch, ok := inv.fills[name]
	if !ok {
		ch = make(chan struct{})
		inv.fills[name] = ch
	}
	return ch, func() {
		inv.mu.Lock()
		defer inv.mu.Unlock()
		if inv.fills[name] == ch {
			delete(inv.fills, name)
		}
	}
}

func (inv *invalidator) fillAnnounced(name string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if ch, ok := inv.fills[name]; ok {
		close(ch)
		delete(inv.fills, name)
	}
}

// hears reports whether this process receives the writes that other
// gateways announce now: its subscription is confirmed and listened to.
// Without Redis there is nothing to hear.
func (inv *invalidator) hears() bool { return inv == nil || inv.live.Load() }

// handle applies another gateway's (or this one's own) announcement and
// acknowledges it.
func (inv *invalidator) handle(ctx context.Context, payload string) {
	msgID, ackTo, items, err := decodeAnnouncement(payload)
	if err != nil {
		inv.log.Warn("invalidation unreadable, local tier emptied", "err", err)
		if inv.front != nil {
			inv.front.disable()
			inv.front.enable()
		}
		return
	}
	if !strings.HasPrefix(msgID, inv.id+"-") {
		inv.apply(items) // this gateway's own writes applied theirs already
	}
	ctx, cancel := context.WithTimeout(ctx, inv.timeout)
	defer cancel()
	if err := inv.rdb.Publish(ctx, ackTo, msgID).Err(); err != nil {
		inv.log.Debug("invalidation acknowledgement lost", "err", err)
	}
}

func (inv *invalidator) acknowledged(msgID string) {
	inv.mu.Lock()
	ch := inv.waiting[msgID]
	inv.mu.Unlock()
	if ch != nil {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// announce publishes items and waits, at most inv.wait, until every
// gateway that received them has acknowledged. A failed publish is logged
// and returned: a gateway that cannot be reached through Redis has lost its
// subscription and emptied its tier, but the change feed retries until the
// announcement went out.
func (inv *invalidator) announce(ctx context.Context, items []Invalidation) error {
	if len(items) == 0 {
		return nil
	}
	msgID := inv.id + "-" + strconv.FormatUint(inv.seq.Add(1), 36)
	acks := make(chan struct{}, 64)
	inv.mu.Lock()
	inv.waiting[msgID] = acks
	inv.mu.Unlock()
	defer func() {
		inv.mu.Lock()
		delete(inv.waiting, msgID)
		inv.mu.Unlock()
	}()

	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), inv.timeout)
	receivers, err := inv.publishEvent(pctx, encodeAnnouncement(msgID, inv.acks, items))
	cancel()
	inv.announced.Add(1)
	if err != nil {
		inv.log.WarnContext(ctx, "invalidation not announced", "err", err)
		return err
	}
	timer := time.NewTimer(inv.wait)
	defer timer.Stop()
	for got := int64(0); got < receivers; got++ {
		select {
		case <-acks:
		case <-timer.C:
			inv.unacknowledged.Add(1)
			inv.log.WarnContext(ctx, "invalidation not acknowledged in time", "receivers", receivers, "acknowledged", got, "wait", inv.wait.String())
			return nil
		}
	}
	return nil
}

// publishEvent publishes msg on the events channel and returns how many
// gateways received it. In a Redis Cluster a PUBLISH reaches every node
// but counts only the subscribers of the node that ran it, and go-redis
// sends it to any node; each gateway subscribes on the master of the
// events channel's slot (go-redis picks the node by the first channel),
// so the event is published there.
func (inv *invalidator) publishEvent(ctx context.Context, msg string) (int64, error) {
	if cc, ok := inv.rdb.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, inv.events)
		if err != nil {
			return 0, fmt.Errorf("events channel's node: %w", err)
		}
		return node.Publish(ctx, inv.events, msg).Result()
	}
	return inv.rdb.Publish(ctx, inv.events, msg).Result()
}

// encodeAnnouncement writes "v1 <msgID> <ackChannel> <id>:<firm>:<no>:<rev> …".
func encodeAnnouncement(msgID, ackTo string, items []Invalidation) string {
	var b strings.Builder
	b.WriteString("v1 " + msgID + " " + ackTo)
	for _, it := range items {
		fmt.Fprintf(&b, " %d:%d:%d:%d", it.ID, it.FirmID, it.No, it.Revision)
	}
	return b.String()
}

func decodeAnnouncement(s string) (msgID, ackTo string, items []Invalidation, err error) {
	fields := strings.Fields(s)
	if len(fields) < 4 || fields[0] != "v1" {
		return "", "", nil, fmt.Errorf("announcement %.40q", s)
	}
	for _, f := range fields[3:] {
		parts := strings.Split(f, ":")
		if len(parts) != 4 {
			return "", "", nil, fmt.Errorf("announcement item %.40q", f)
		}
		var n [4]int64
		for i, p := range parts {
			if n[i], err = strconv.ParseInt(p, 10, 64); err != nil {
				return "", "", nil, fmt.Errorf("announcement item %.40q", f)
			}
		}
		items = append(items, Invalidation{ID: n[0], FirmID: n[1], No: n[2], Revision: n[3]})
	}
	return fields[1], fields[2], items, nil
}
