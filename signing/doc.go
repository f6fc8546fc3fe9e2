// Package signing owns the keys that sign and verify the gateway's tokens.
//
// The fleet's key set lives in the store (upstream.SigningKey): the public
// half of every asymmetric key, the algorithm it pins, and its role:
// published (it verifies, and the JWKS lists it), the signer, or retired
// (it verifies until its last token has expired). Every gateway reads the
// set at start and polls it, so all of them accept and publish the same
// keys. The private halves never enter the store: each gateway holds them
// in PEM files, named in the configuration or generated into its data
// directory (mode 0600), and publishes their public halves when it starts.
// HS256 secrets from the configuration verify beside them, and sign where
// HS256 is the configured algorithm; the JWKS never lists them.
//
// Concurrency: a Keyring is safe for concurrent use. The KeySet it hands
// out is an immutable snapshot; a refresh replaces it whole.
package signing
