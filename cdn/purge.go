// Package cdn talks to the CDN in front of the gateway: it sends purges
// for surrogate keys in the background, behind a breaker, so that a write
// never waits for the CDN. It knows nothing of listings.
//
// Concurrency: a *Purger is safe for concurrent use; Run must be running
// for purges to be sent.
package cdn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/realty-gateway/gateway/breaker"
	"github.com/realty-gateway/gateway/internal/settings"
)

// Config names a CDN's purge API. An empty URL sends no purges.
type Config struct {
	// URL is where a purge is POSTed; "{key}" is replaced by the
	// path-escaped surrogate key, which is also the request body.
	URL settings.DSN `yaml:"url" env:"URL" help:"POST target of purges, {key} = surrogate key; empty = no purges"`
	// Header is an optional "Name: value" sent with each purge (an API
	// token).
	Header  settings.Secret `yaml:"header" env:"HEADER" help:"\"Name: value\" header sent with purges (secret)"`
	Timeout time.Duration   `yaml:"timeout" env:"TIMEOUT" help:"deadline of one purge request"`
	// Queue is how many purges may wait; more are dropped and logged.
	Queue int `yaml:"-"`
}

// DefaultConfig sends no purges.
func DefaultConfig() Config { return Config{Timeout: 2 * time.Second, Queue: 4096} }

// Validate reports a setting out of its range.
func (c Config) Validate() error {
	if c.Timeout <= 0 {
		return errors.New("purge timeout must be positive")
	}
	return nil
}

// Purger sends CDN purges in the background, behind its own breaker.
type Purger struct {
	cfg     Config
	client  *http.Client
	cb      *gobreaker.CircuitBreaker[struct{}]
	queue   chan string
	log     *slog.Logger
	sent    atomic.Uint64
	dropped atomic.Uint64
}

// NewPurger returns a Purger for cfg.
func NewPurger(cfg Config, log *slog.Logger) *Purger {
	return &Purger{
		cfg:    cfg,
		client: &http.Client{Timeout: cfg.Timeout},
		cb: gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
			Name:          "cdn-purge",
			Timeout:       30 * time.Second,
			OnStateChange: breaker.LogStateChanges(log),
		}),
		queue: make(chan string, max(cfg.Queue, 1)),
		log:   log,
	}
}

// Purge queues surrogate keys for purging. It never blocks.
func (p *Purger) Purge(keys ...string) {
	for _, k := range keys {
		select {
		case p.queue <- k:
		default:
			p.dropped.Add(1)
			p.log.Warn("CDN purge queue full, purge dropped", "key", k)
		}
	}
}

// Sent and Dropped count purges.
func (p *Purger) Sent() uint64    { return p.sent.Load() }
func (p *Purger) Dropped() uint64 { return p.dropped.Load() }

// Run sends queued purges until ctx ends, then sends what is still queued
// within one more Timeout, so that a shutdown does not lose the purges of
// the last writes. A purge under way is not cut short by ctx: the client's
// Timeout bounds it.
func (p *Purger) Run(ctx context.Context) {
	send := context.WithoutCancel(ctx)
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case k := <-p.queue:
			p.purge(send, k)
		}
	}
	drain, cancel := context.WithTimeout(send, p.cfg.Timeout)
	defer cancel()
	for drain.Err() == nil {
		select {
		case k := <-p.queue:
			p.purge(drain, k)
		default:
			return
		}
	}
}

func (p *Purger) purge(ctx context.Context, key string) {
	if _, err := p.cb.Execute(func() (struct{}, error) { return struct{}{}, p.send(ctx, key) }); err != nil {
		p.dropped.Add(1)
		p.log.Warn("CDN purge failed", "key", key, "err", err)
		return
	}
	p.sent.Add(1)
}

func (p *Purger) send(ctx context.Context, key string) error {
	target := strings.ReplaceAll(string(p.cfg.URL), "{key}", url.PathEscape(key))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, strings.NewReader(key))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/plain")
	if name, value, ok := strings.Cut(string(p.cfg.Header), ":"); ok {
		req.Header.Set(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	resp, err := p.client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			return fmt.Errorf("purge %s: %w", key, uerr.Err)
		}
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("purge %s: status %d", key, resp.StatusCode)
	}
	return nil
}
