// Package faultpoint marks the places where a test may make the gateway
// fail on purpose, such as dying between a store commit and the cache
// update. A normal build compiles every Hit away: only a binary built with
// the tag "faultpoints" (go build -tags faultpoints), which only tests
// build, reads GATEWAY_FAULTPOINT and acts on it.
//
// Concurrency: Hit is safe for concurrent use.
package faultpoint

// Point names a place in the code.
type Point string

// AfterCommit is right after a write's store commit, before any cache,
// other gateway or CDN has heard of it.
const AfterCommit Point = "after-commit"
