// Package cdn talks to the CDN in front of the gateway: it purges
// surrogate keys in the formats that Varnish (xkey), Fastly, Cloudflare
// and a plain URL template take, and delivers every purge even through an
// outage of the CDN: queued, retried with backoff, given up only once the
// copy it targets has expired anyway, and repeated once after a delay to
// catch a fetch that was in flight during the write. A write's purge is
// foreground (PurgeThen), background work's such as the change feed's is
// background (PurgeBackground): each has its own queue and the writes'
// synchronous purges their own breaker, so background failures never
// refuse a write its purge. It knows nothing of listings.
//
// Concurrency: a *Purger is safe for concurrent use; Run must be running
// for queued purges to be sent.
package cdn

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/realty-gateway/gateway/breaker"
	"github.com/realty-gateway/gateway/internal/settings"
)

// Config names a CDN's purge API. An empty URL sends no purges.
type Config struct {
	URL    settings.DSN    `yaml:"url" env:"PURGE_URL" help:"purge API: a template with {key}, Varnish's address, Fastly's service URL or Cloudflare's purge_cache URL; empty = no purges"`
	Header settings.Secret `yaml:"header" env:"PURGE_HEADER" help:"\"Name: value\" header sent with purges, such as an API token (secret)"`
	Format string          `yaml:"format" env:"PURGE_FORMAT" help:"template, varnish-xkey, fastly or cloudflare"`
	// Soft purges updates that keep a listing visible: the CDN may serve
	// the old copy while it fetches the new one. Visibility changes are
	// always hard.
	Soft    bool          `yaml:"soft" env:"PURGE_SOFT" help:"soft-purge updates that keep a listing visible (varnish-xkey, fastly); visibility changes are always hard"`
	Sync    bool          `yaml:"sync" env:"PURGE_SYNC" help:"a write waits, at most the purge timeout, until the CDN acknowledged its hard purge"`
	Timeout time.Duration `yaml:"timeout" env:"PURGE_TIMEOUT" help:"deadline of one purge request, and of a write's wait with sync"`
	// RepurgeAfter repeats each purge once, after a fetch that was in
	// flight during the write has returned.
	RepurgeAfter time.Duration `yaml:"repurgeAfter" env:"REPURGE_AFTER" help:"each purge is sent again this long after it succeeded; 0 = the store timeout plus 1s"`
}

// DefaultConfig sends no purges.
func DefaultConfig() Config {
	return Config{Format: FormatTemplate, Timeout: 2 * time.Second}
}

// DefaultQueue is how many purges may wait in each of the two queues
// (foreground, background) unless Deps says otherwise.
const DefaultQueue = 4096

// Deps are what a Purger takes from other parts' settings, and its log.
type Deps struct {
	// GiveUpAfter is how long a purge is retried: past it the copy it
	// targets has expired (s-maxage + stale-while-revalidate +
	// stale-if-error).
	GiveUpAfter time.Duration
	// StoreTimeout is the longest a fetch in flight can take.
	StoreTimeout time.Duration
	// Queue is how many purges may wait in each queue; 0: DefaultQueue.
	Queue int
	Log   *slog.Logger
}

// validate reports every value out of its range.
func (d Deps) validate() error {
	var errs []error
	if d.GiveUpAfter < 0 || d.StoreTimeout < 0 {
		errs = append(errs, errors.New("purger: giveUpAfter and storeTimeout must not be negative"))
	}
	if d.Queue < 0 {
		errs = append(errs, errors.New("purger: queue must not be negative"))
	}
	if d.Log == nil {
		errs = append(errs, errors.New("purger: log is required"))
	}
	return errors.Join(errs...)
}

// Validate reports every setting out of its range.
func (c Config) Validate() error {
	var errs []error
	if c.Timeout <= 0 {
		errs = append(errs, errors.New("purge.timeout must be positive"))
	}
	if c.RepurgeAfter < 0 {
		errs = append(errs, errors.New("purge.repurgeAfter must not be negative"))
	}
	if !slices.Contains([]string{FormatTemplate, FormatVarnishXkey, FormatFastly, FormatCloudflare}, c.Format) {
		errs = append(errs, fmt.Errorf("purge.format %q: want template, varnish-xkey, fastly or cloudflare", c.Format))
	}
	return errors.Join(errs...)
}

// job is one purge: its keys, and where it stands.
type job struct {
	background bool // background work's: sent after the writes' purges
	hard       bool
	keys       []string
	giveUp     time.Time
	next       time.Time // when to send it (again)
	attempt    int
	repeated   bool // the delayed repeat, or a purge that needs none
	// done, when set, is told once whether the purge was delivered, or
	// given up (dropped) instead.
	done func(delivered bool)
}

// finish tells j's done, once.
func (j *job) finish(delivered bool) {
	if j.done != nil {
		j.done(delivered)
		j.done = nil
	}
}

// Purger sends purges: a write's synchronous purge on the write's own
// goroutine, everything else through the queues that Run sends.
type Purger struct {
	cfg    Config
	deps   Deps
	client *http.Client
	// Two breakers, each judged only on its own attempts: syncCB in front
	// of the writes' synchronous purges, queueCB in front of Run's sends
	// (background purges, retries, repeats). A replay failing while the
	// CDN starts opens queueCB alone, so the next write's purge is judged
	// on the CDN as it is then; a dead CDN still opens syncCB after three
	// writes' attempts, and then only the write that probes it each
	// second waits its timeout.
	syncCB, queueCB *gobreaker.CircuitBreaker[struct{}]
	// foreground and background hand jobs to Run, each bounded by
	// Deps.Queue: a burst of background purges drops no write's.
	foreground, background chan *job
	log                    *slog.Logger
	now                    func() time.Time

	sent, failed, dropped atomic.Uint64
	// pending counts purges queued and not yet delivered or given up.
	pending atomic.Int64
}

// NewPurger returns a Purger for cfg; an empty Format is a template.
func NewPurger(cfg Config, deps Deps) (*Purger, error) {
	if cfg.Format == "" {
		cfg.Format = FormatTemplate
	}
	if err := errors.Join(cfg.Validate(), deps.validate()); err != nil {
		return nil, err
	}
	if deps.Queue == 0 {
		deps.Queue = DefaultQueue
	}
	return &Purger{
		cfg:        cfg,
		deps:       deps,
		client:     &http.Client{Timeout: cfg.Timeout},
		syncCB:     gobreaker.NewCircuitBreaker[struct{}](breaker.FastFail("cdn-purge-sync", deps.Log)),
		queueCB:    gobreaker.NewCircuitBreaker[struct{}](breaker.FastFail("cdn-purge", deps.Log)),
		foreground: make(chan *job, deps.Queue),
		background: make(chan *job, deps.Queue),
		log:        deps.Log,
		now:        time.Now,
	}, nil
}

// Purge asks the CDN to drop what it holds under keys; hard: not even a
// stale copy may be served. It queues the purge and returns, except with
// Sync and a hard purge: then it first tries to deliver it, for at most
// the purge timeout, and queues it only if that failed.
func (p *Purger) Purge(ctx context.Context, hard bool, keys ...string) {
	p.PurgeThen(ctx, hard, nil, keys...)
}

// PurgeThen purges as Purge does, and then calls done once: with true when
// the CDN acknowledged the purge, with false when it was given up or
// dropped. A purge still queued when the process ends calls nothing.
func (p *Purger) PurgeThen(ctx context.Context, hard bool, done func(delivered bool), keys ...string) {
	j := p.newJob(false, hard, done, keys)
	if j == nil {
		return
	}
	if p.cfg.Sync && j.hard {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.Timeout)
		defer cancel()
		if p.attempt(ctx, p.syncCB, j) == nil {
			// Delivered: what is left is the repeat.
			j.finish(true)
			j.repeated, j.attempt, j.next = true, 0, p.now().Add(p.repurgeAfter())
		}
	}
	p.enqueue(ctx, j)
}

// PurgeBackground purges as PurgeThen does, for background work such as
// the change feed's: it never waits, even with Sync, and goes through the
// background queue, sent after the writes' purges, behind Run's breaker
// only; its failures never refuse a write's synchronous purge.
func (p *Purger) PurgeBackground(ctx context.Context, hard bool, done func(delivered bool), keys ...string) {
	if j := p.newJob(true, hard, done, keys); j != nil {
		p.enqueue(ctx, j)
	}
}

// newJob returns the purge of keys, or nil, having told done, for none.
func (p *Purger) newJob(background, hard bool, done func(delivered bool), keys []string) *job {
	if len(keys) == 0 {
		if done != nil {
			done(true)
		}
		return nil
	}
	return &job{background: background, hard: hard || !p.cfg.Soft, keys: keys,
		giveUp: p.now().Add(p.deps.GiveUpAfter), done: done}
}

// PurgeNow sends a hard purge of keys once, for at most the purge
// timeout, and reports whether the CDN acknowledged it. Nothing is queued:
// it is the operator's command.
func (p *Purger) PurgeNow(ctx context.Context, keys ...string) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	return p.attempt(ctx, p.syncCB, &job{hard: true, keys: keys})
}

func (p *Purger) enqueue(ctx context.Context, j *job) {
	if !j.repeated {
		p.pending.Add(1) // before the worker can see it, so never below 0
	}
	queue := p.foreground
	if j.background {
		queue = p.background
	}
	select {
	case queue <- j:
	default:
		if !j.repeated {
			p.pending.Add(-1)
		}
		p.dropped.Add(1)
		p.log.WarnContext(ctx, "CDN purge queue full, purge dropped", "keys", strings.Join(j.keys, " "))
		j.finish(false)
	}
}

// Sent, Failed and Dropped count purge requests delivered, attempts that
// failed, and purges given up.
func (p *Purger) Sent() uint64    { return p.sent.Load() }
func (p *Purger) Failed() uint64  { return p.failed.Load() }
func (p *Purger) Dropped() uint64 { return p.dropped.Load() }

// Stats are the purger's counters as /stats shows them.
type Stats struct {
	Sent    uint64 `json:"sent"`
	Failed  uint64 `json:"failed"`
	Dropped uint64 `json:"dropped"`
}

// Stats returns the counters; a nil Purger (no CDN configured) has none.
func (p *Purger) Stats() Stats {
	if p == nil {
		return Stats{}
	}
	return Stats{Sent: p.Sent(), Failed: p.Failed(), Dropped: p.Dropped()}
}

// Pending is how many purges wait to be delivered: queued, or retried
// after failed attempts. A delivered purge's delayed repeat is not
// counted. It grows while the CDN does not take purges.
func (p *Purger) Pending() int64 { return p.pending.Load() }

// BreakerState is the state of the breaker in front of the queued
// purges (Run's sends).
func (p *Purger) BreakerState() breaker.State { return breaker.StateOf(p.queueCB) }

// SyncBreakerState is the state of the breaker in front of the writes'
// synchronous purges; it stays closed without Sync.
func (p *Purger) SyncBreakerState() breaker.State { return breaker.StateOf(p.syncCB) }

func (p *Purger) repurgeAfter() time.Duration {
	if p.cfg.RepurgeAfter > 0 {
		return p.cfg.RepurgeAfter
	}
	return p.deps.StoreTimeout + time.Second
}

// backoff is the wait before attempt n+1: 100 ms doubling to 1 s, so that
// a CDN that comes back gets its queue within about a second.
func backoff(attempt int) time.Duration {
	return min(100*time.Millisecond<<min(attempt, 4), time.Second)
}

// Run sends queued purges until ctx ends: each when it is due, failures
// again after a backoff until they are given up, successes once more
// after RepurgeAfter. When ctx ends it sends what is due within one more
// Timeout, so that a shutdown does not lose the last writes' purges.
func (p *Purger) Run(ctx context.Context) {
	var waiting []*job
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	send := context.WithoutCancel(ctx)
	for ctx.Err() == nil {
		waiting = p.sendDue(send, waiting)
		timer.Reset(p.untilNext(waiting))
		select {
		case <-ctx.Done():
		// Everything waiting goes out together, batched where the format
		// allows.
		case j := <-p.foreground:
			waiting = p.drainQueue(append(waiting, j))
		case j := <-p.background:
			waiting = p.drainQueue(append(waiting, j))
		case <-timer.C:
		}
	}
	drain, cancel := context.WithTimeout(send, p.cfg.Timeout)
	defer cancel()
	waiting = foregroundFirst(p.drainQueue(waiting))
	for _, j := range waiting {
		if !j.repeated && drain.Err() == nil && p.attempt(drain, p.queueCB, j) == nil { // failures are logged; the process is ending
			p.pending.Add(-1)
		}
	}
}

// drainQueue appends every job queued now to waiting.
func (p *Purger) drainQueue(waiting []*job) []*job {
	for {
		select {
		case j := <-p.foreground:
			waiting = append(waiting, j)
		case j := <-p.background:
			waiting = append(waiting, j)
		default:
			return waiting
		}
	}
}

// sendDue sends the jobs that are due and returns those still waiting.
func (p *Purger) sendDue(ctx context.Context, waiting []*job) []*job {
	now := p.now()
	var due []*job
	kept := waiting[:0]
	for _, j := range waiting {
		if j.next.After(now) {
			kept = append(kept, j)
		} else {
			due = append(due, j)
		}
	}
	for _, batch := range p.batches(due) {
		sent := &job{hard: batch[0].hard, attempt: batch[0].attempt}
		for _, j := range batch {
			sent.keys = append(sent.keys, j.keys...)
		}
		err := p.attempt(ctx, p.queueCB, sent)
		for _, j := range batch {
			j.attempt++
			switch {
			case err == nil:
				j.finish(true)
				if !j.repeated {
					p.pending.Add(-1)
					j.repeated, j.attempt, j.next = true, 0, now.Add(p.repurgeAfter())
					j.giveUp = j.next.Add(p.deps.GiveUpAfter)
					kept = append(kept, j)
				}
			case now.After(j.giveUp):
				if !j.repeated {
					p.pending.Add(-1)
				}
				j.finish(false)
				p.dropped.Add(1)
				p.log.Error("CDN purge given up; the copy it targets has expired by now", "keys", strings.Join(j.keys, " "), "attempts", j.attempt)
			default:
				j.next = now.Add(backoff(j.attempt))
				kept = append(kept, j)
			}
		}
	}
	return kept
}

// maxBatchKeys bounds the keys of one request (Cloudflare takes 30 tags).
const maxBatchKeys = 30

// batches groups due jobs into requests, the writes' purges leading:
// formats that take many keys at once (varnish-xkey, cloudflare) get one
// request per kind for up to maxBatchKeys keys; the others one request
// per job.
func (p *Purger) batches(due []*job) [][]*job {
	due = foregroundFirst(due)
	if p.cfg.Format != FormatVarnishXkey && p.cfg.Format != FormatCloudflare {
		out := make([][]*job, len(due))
		for i, j := range due {
			out[i] = []*job{j}
		}
		return out
	}
	var out [][]*job
	for _, hard := range []bool{true, false} {
		var batch []*job
		keys := 0
		for _, j := range due {
			if j.hard != hard {
				continue
			}
			if len(batch) > 0 && keys+len(j.keys) > maxBatchKeys {
				out = append(out, batch)
				batch, keys = nil, 0
			}
			batch = append(batch, j)
			keys += len(j.keys)
		}
		if len(batch) > 0 {
			out = append(out, batch)
		}
	}
	return out
}

func (p *Purger) untilNext(waiting []*job) time.Duration {
	d := time.Hour
	for _, j := range waiting {
		d = min(d, max(j.next.Sub(p.now()), 0))
	}
	return d
}

// foregroundFirst orders jobs in place, the writes' before background
// work's, each in the order it came.
func foregroundFirst(jobs []*job) []*job {
	slices.SortStableFunc(jobs, func(a, b *job) int {
		return cmp.Compare(boolInt(a.background), boolInt(b.background))
	})
	return jobs
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// attempt sends j once through cb; nil when the CDN acknowledged it.
func (p *Purger) attempt(ctx context.Context, cb *gobreaker.CircuitBreaker[struct{}], j *job) error {
	j.attempt++
	_, err := cb.Execute(func() (struct{}, error) { return struct{}{}, p.send(ctx, j) })
	if err != nil {
		p.failed.Add(1)
		if j.attempt == 1 || !errors.Is(err, gobreaker.ErrOpenState) {
			p.log.Warn("CDN purge failed", "keys", strings.Join(j.keys, " "), "attempt", j.attempt, "err", err)
		}
		return err
	}
	p.sent.Add(1)
	return nil
}
