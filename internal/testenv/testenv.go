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

// WaitFor polls cond until it holds, failing the test after 5 s. It is for
// waiting on another goroutine's progress, never for timing.
func WaitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
