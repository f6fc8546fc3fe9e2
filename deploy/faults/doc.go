// Package faults is the gateway's fault suite: it runs a bounded load
// against the built binary with a redis-server of its own and a fresh
// PostgreSQL database, injects one fault per phase (Redis stopped, paused,
// slowed; PostgreSQL connections terminated, the database closed; SIGTERM of
// the gateway) and checks that no response is wrong and no 5xx is
// unexpected. It is opt-in: it runs only with GATEWAY_FAULTS=1, as
//
//	GATEWAY_FAULTS=1 go test -count=1 -v ./deploy/faults/
//
// and writes its table to the file named by GATEWAY_FAULTS_REPORT, if set.
// The package has no code outside its tests.
package faults
