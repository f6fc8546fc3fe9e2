package gateway

import (
	"github.com/realty-gateway/gateway/signing"
)

// SigningKey is one HS256 key; its ID goes in the token's kid header.
type SigningKey = signing.HMACKey

// TokenKeys are the keys that sign and verify tokens: a *signing.Keyring,
// or StaticKeys of the configured HS256 secrets.
type TokenKeys interface {
	// Current is the key set in force; it is read once per use.
	Current() *signing.KeySet
	// DeploymentSecret is shared by the deployment's gateways.
	DeploymentSecret() []byte
}

// StaticKeys are HS256 keys that never change: the first signs.
type StaticKeys struct {
	set    *signing.KeySet
	secret []byte
}

// NewStaticKeys builds StaticKeys of keys.
func NewStaticKeys(keys []SigningKey) (*StaticKeys, error) {
	set, err := signing.NewStatic(keys)
	if err != nil {
		return nil, err
	}
	return &StaticKeys{set: set, secret: keys[len(keys)-1].Secret}, nil
}

func (k *StaticKeys) Current() *signing.KeySet { return k.set }

func (k *StaticKeys) DeploymentSecret() []byte { return k.secret }
