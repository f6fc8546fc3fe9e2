package breaker

import (
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestNewGuardRefusesBadSettings: NewGuard names what it refuses.
func TestNewGuardRefusesBadSettings(t *testing.T) {
	answered := func(err error) bool { return err == nil }
	quiet := slog.New(slog.DiscardHandler)
	tests := []struct {
		name     string
		change   func(name *string, c *Config, l *Limits, answered *func(error) bool, log **slog.Logger)
		wantText string
	}{
		{name: "window", change: func(_ *string, c *Config, _ *Limits, _ *func(error) bool, _ **slog.Logger) { c.Window = 0 }, wantText: "window"},
		{name: "open for", change: func(_ *string, c *Config, _ *Limits, _ *func(error) bool, _ **slog.Logger) { c.OpenFor = -1 }, wantText: "openFor"},
		{name: "failure ratio", change: func(_ *string, c *Config, _ *Limits, _ *func(error) bool, _ **slog.Logger) { c.FailureRatio = 0 }, wantText: "failureRatio"},
		{name: "call timeout", change: func(_ *string, _ *Config, l *Limits, _ *func(error) bool, _ **slog.Logger) { l.CallTimeout = 0 }, wantText: "callTimeout"},
		{name: "concurrency", change: func(_ *string, _ *Config, l *Limits, _ *func(error) bool, _ **slog.Logger) { l.MaxConcurrent = -1 }, wantText: "maxConcurrent"},
		{name: "name", change: func(n *string, _ *Config, _ *Limits, _ *func(error) bool, _ **slog.Logger) { *n = "" }, wantText: "name"},
		{name: "answered", change: func(_ *string, _ *Config, _ *Limits, a *func(error) bool, _ **slog.Logger) { *a = nil }, wantText: "answered"},
		{name: "log", change: func(_ *string, _ *Config, _ *Limits, _ *func(error) bool, l **slog.Logger) { *l = nil }, wantText: "log"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name, cfg, lim, ans, log := "store", DefaultConfig(), Limits{CallTimeout: time.Second}, answered, quiet
			tt.change(&name, &cfg, &lim, &ans, &log)
			if _, err := NewGuard(name, cfg, lim, ans, log); err == nil || !strings.Contains(err.Error(), tt.wantText) {
				t.Fatalf("error %v; want one naming %s", err, tt.wantText)
			}
		})
	}
	g, err := NewGuard("store", DefaultConfig(), Limits{CallTimeout: time.Second}, answered, quiet)
	if err != nil {
		t.Fatalf("NewGuard with good settings: %v", err)
	}
	if cap(g.slots) != 1 {
		t.Fatalf("%d slots for MaxConcurrent 0; want 1", cap(g.slots))
	}
}
