package main

import "github.com/realty-gateway/gateway/internal/demo"

// demoCredentialsFile is the name e2e_test.go still uses. Delete this file
// once the e2e tests have left the root package (issue 18).
const demoCredentialsFile = demo.CredentialsFile
