// Package testenv finds the real services that tests run against: Redis and
// PostgreSQL, through environment variables with the local default ports as
// the fallback. Where a service cannot be reached the test is skipped with a
// visible message, unless GATEWAY_TEST_REQUIRE_SERVICES=1 (set by .ci/run)
// turns the skip into a failure.
//
// Concurrency: every function is safe to call from parallel tests.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/jackc/pgx/v5"
)

const (
	defaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	defaultRedisAddr   = "127.0.0.1:6379"
)

// RequireServices reports whether a missing service fails the test.
func RequireServices() bool {
	return os.Getenv("GATEWAY_TEST_REQUIRE_SERVICES") == "1"
}

func unavailable(t testing.TB, what string, err error) {
	t.Helper()
	if RequireServices() {
		t.Fatalf("%s unreachable and GATEWAY_TEST_REQUIRE_SERVICES=1: %v", what, err)
	}
	t.Skipf("SKIP: %s unreachable (%v); set it up to run this test", what, err)
}

// RandomName returns a short random identifier for keys and databases.
func RandomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// RedisAddr returns the address of a reachable Redis (GATEWAY_TEST_REDIS_ADDR,
// default 127.0.0.1:6379) or skips the test.
func RedisAddr(t testing.TB) string {
	t.Helper()
	addr, err := redisAddr()
	if err != nil {
		unavailable(t, "Redis at "+addr, err)
	}
	return addr
}

// RedisOrStandIn returns a reachable Redis, or, when none can be reached
// and services are not required, an in-process miniredis, saying so.
func RedisOrStandIn(t testing.TB) string {
	t.Helper()
	addr, err := redisAddr()
	if err == nil {
		return addr
	}
	if RequireServices() {
		t.Fatalf("Redis at %s unreachable and GATEWAY_TEST_REQUIRE_SERVICES=1: %v", addr, err)
	}
	fmt.Fprintf(os.Stderr, "NOTE: Redis at %s unreachable (%v); %s runs against an in-process miniredis\n", addr, err, t.Name())
	return miniredis.RunT(t).Addr()
}

func redisAddr() (string, error) {
	addr := os.Getenv("GATEWAY_TEST_REDIS_ADDR")
	if addr == "" {
		addr = defaultRedisAddr
	}
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return addr, err
	}
	return addr, conn.Close()
}

// PostgresURL creates a fresh database on the server named by
// GATEWAY_TEST_POSTGRES_URL (default the local "test" database), drops it
// when the test ends, and returns its URL. It skips when none is reachable.
func PostgresURL(t testing.TB) string {
	t.Helper()
	admin := os.Getenv("GATEWAY_TEST_POSTGRES_URL")
	if admin == "" {
		admin = defaultPostgresURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		unavailable(t, "PostgreSQL", err)
	}
	defer conn.Close(context.Background())

	name := RandomName("gwtest_")
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Logf("drop database %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})

	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("parse %s: %v", admin, err)
	}
	u.Path = "/" + strings.TrimPrefix(name, "/")
	return u.String()
}

// DefaultPatience is how long a test waits, by default, for what it
// expects to happen eventually: far above what anything takes on a quiet
// machine (milliseconds to a second), so that a laptop or a shared CI
// runner with every core busy still passes. Tests prove order and
// eventual visibility; the tight figures (lag, latency) are measured in
// the benchmarks (deploy/bench) and logged, never asserted.
const DefaultPatience = 30 * time.Second

// Patience is how long a test waits for what it expects to happen
// eventually: GATEWAY_TEST_PATIENCE (a Go duration, e.g. "2m" on a very
// slow machine) or DefaultPatience. A wait that runs out fails the test,
// so a broken feature still fails, only later. Bounds that a test needs to
// stay below (a cache's freshness that would otherwise let a test pass
// without the feature) are checked against it with NeedPatienceBelow.
func Patience() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("GATEWAY_TEST_PATIENCE")); err == nil && d > 0 {
		return d
	}
	return DefaultPatience
}

// NeedPatienceBelow fails the test unless Patience is below bound: what
// the test waits for must not be able to happen within its patience
// without the feature under test (bound, e.g. a cache's freshness, names
// what would bring it about otherwise).
func NeedPatienceBelow(t testing.TB, bound time.Duration, what string) {
	t.Helper()
	if p := Patience(); p >= bound {
		t.Fatalf("GATEWAY_TEST_PATIENCE %v is not below %s (%v): the test could pass without what it tests", p, what, bound)
	}
}

// Eventually polls cond every millisecond until it holds and returns how
// long that took, failing the test, naming what, after Patience. It is
// for waiting on another goroutine's or process's progress, never for
// timing: the duration it returns is for logs.
func Eventually(t testing.TB, what string, cond func() bool) time.Duration {
	t.Helper()
	return poll(t, what, time.Millisecond, cond)
}

// WaitFor is Eventually without a name.
func WaitFor(t testing.TB, cond func() bool) {
	t.Helper()
	poll(t, "condition", time.Millisecond, cond)
}

// poll is Eventually with the pause between tries.
func poll(t testing.TB, what string, every time.Duration, cond func() bool) time.Duration {
	t.Helper()
	began := time.Now()
	patience := Patience()
	for !cond() {
		if time.Since(began) > patience {
			t.Fatalf("%s: not reached in %v (GATEWAY_TEST_PATIENCE)", what, patience)
		}
		time.Sleep(every)
	}
	return time.Since(began)
}
