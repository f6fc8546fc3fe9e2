// Package e2e owns the end-to-end tests of the gateway. TestMain builds the
// binary once from the module root; each test then runs it as a client
// meets it: gateway processes and admin subcommands on real PostgreSQL,
// Redis (one node, a cluster, sentinels) and SQLite, driven over HTTP.
// Faults come from TCP proxies in front of Redis and PostgreSQL, or from
// servers a test starts on its own, so the shared servers keep running for
// other tests. The package has no code but its tests: helpers_test.go holds
// the harness the test files share.
//
// Concurrency: the tests run one at a time; each owns the processes,
// databases and Redis key prefixes it creates and removes them in its
// Cleanup.
package e2e
