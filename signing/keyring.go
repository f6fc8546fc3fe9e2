package signing

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

// Config says which algorithm signs and where the private keys are.
type Config struct {
	// Algorithm signs new tokens: EdDSA, ES256 or HS256.
	Algorithm string
	// KeyFiles names the private keys as "kid:alg:path" entries, comma
	// separated; empty: every <kid>.pem in KeyDir.
	KeyFiles string
	// KeyDir is where keys are generated and found when KeyFiles is empty.
	KeyDir string
	// Poll is how often the key set is read from the store.
	Poll time.Duration
}

// Validate reports a setting out of its range.
func (c Config) Validate() error {
	var errs []error
	switch c.Algorithm {
	case upstream.SigningAlgEdDSA, upstream.SigningAlgES256, AlgHS256:
	default:
		errs = append(errs, fmt.Errorf("http.jwt.algorithm %q: want EdDSA, ES256 or HS256", c.Algorithm))
	}
	if c.Poll <= 0 {
		errs = append(errs, errors.New("http.jwt.keysPoll must be positive"))
	}
	if c.KeyFiles == "" && c.KeyDir == "" {
		errs = append(errs, errors.New("no key files and no key directory"))
	}
	return errors.Join(errs...)
}

// Store is the part of the store that holds the fleet's key set.
type Store interface {
	AddSigningKey(ctx context.Context, k upstream.SigningKey, at time.Time) (upstream.SigningKey, error)
	SigningKeys(ctx context.Context) ([]upstream.SigningKey, error)
	ActivateSigningKey(ctx context.Context, kid string, at time.Time) (upstream.SigningKey, error)
}

// Deps are a Keyring's collaborators.
type Deps struct {
	Store Store
	// HMAC are the configured HS256 keys: they verify, and the first signs
	// under HS256.
	HMAC []HMACKey
	Log  *slog.Logger
}

// Keyring keeps the current KeySet: built by Start, refreshed by Run.
type Keyring struct {
	cfg     Config
	deps    Deps
	current atomic.Pointer[KeySet]
	// local is written by Start, then by Run's refreshes only.
	local  map[string]LocalKey
	secret []byte
}

// New checks cfg and reads the private key files; a file at fault is an
// error that names it. Nothing is written.
func New(cfg Config, deps Deps) (*Keyring, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	if deps.Store == nil || deps.Log == nil {
		return nil, errors.New("signing: a store and a logger are required")
	}
	r := &Keyring{cfg: cfg, deps: deps}
	var err error
	if r.local, err = r.readLocal(); err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	return r, nil
}

// readLocal reads the configured key files, else the key directory.
func (r *Keyring) readLocal() (map[string]LocalKey, error) {
	if r.cfg.KeyFiles != "" {
		return ReadKeyFiles(r.cfg.KeyFiles)
	}
	return ReadKeyDir(r.cfg.KeyDir)
}

// ReadKeyFiles reads "kid:alg:path" entries, comma separated.
func ReadKeyFiles(list string) (map[string]LocalKey, error) {
	keys := map[string]LocalKey{}
	for i, entry := range strings.Split(list, ",") {
		kid, rest, ok1 := strings.Cut(strings.TrimSpace(entry), ":")
		alg, path, ok2 := strings.Cut(rest, ":")
		if !ok1 || !ok2 || kid == "" || path == "" {
			return nil, fmt.Errorf("http.jwt.keyFiles entry %d: want kid:alg:path", i+1)
		}
		if alg != upstream.SigningAlgEdDSA && alg != upstream.SigningAlgES256 {
			return nil, fmt.Errorf("http.jwt.keyFiles entry %d (kid %s): algorithm %q: want EdDSA or ES256", i+1, kid, alg)
		}
		if _, dup := keys[kid]; dup {
			return nil, fmt.Errorf("http.jwt.keyFiles entry %d: two keys have kid %q", i+1, kid)
		}
		k, err := ReadKeyFile(path, kid, alg)
		if err != nil {
			return nil, err
		}
		keys[kid] = k
	}
	return keys, nil
}

// ReadKeyDir reads every <kid>.pem of dir; the key's type gives its
// algorithm. A missing directory holds no keys.
func ReadKeyDir(dir string) (map[string]LocalKey, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.pem"))
	if err != nil {
		return nil, err
	}
	keys := map[string]LocalKey{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("key file %s: %w", p, err)
		}
		priv, err := parsePrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("key file %s: %w", p, err)
		}
		alg := upstream.SigningAlgEdDSA
		if _, ok := priv.Public().(interface{ Bytes() ([]byte, error) }); ok {
			alg = upstream.SigningAlgES256 // an *ecdsa.PublicKey; newLocalKey checks the curve
		}
		k, err := ReadKeyFile(p, strings.TrimSuffix(filepath.Base(p), ".pem"), alg)
		if err != nil {
			return nil, err
		}
		keys[k.ID] = k
	}
	return keys, nil
}

// Start makes the first KeySet: it generates a key where an asymmetric
// algorithm signs and this gateway holds none, publishes every local key,
// makes one the signer where the fleet has none, and reads the set.
func (r *Keyring) Start(ctx context.Context) error {
	now := time.Now()
	if r.cfg.Algorithm != AlgHS256 && len(r.local) == 0 && r.cfg.KeyFiles == "" {
		k, err := GenerateKeyFile(r.cfg.KeyDir, r.cfg.Algorithm)
		if err != nil {
			return fmt.Errorf("signing: %w", err)
		}
		r.deps.Log.Info("generated a token signing key", "kid", k.ID, "alg", k.Alg, "file", k.File)
		r.local = map[string]LocalKey{k.ID: k}
	}
	for _, id := range slices.Sorted(maps.Keys(r.local)) {
		if _, err := r.deps.Store.AddSigningKey(ctx, r.local[id].published(), now); err != nil {
			return fmt.Errorf("signing: publish key %s of %s: %w", id, r.local[id].File, err)
		}
	}
	stored, err := r.deps.Store.SigningKeys(ctx)
	if err != nil {
		return fmt.Errorf("signing: %w", err)
	}
	if _, ok := upstream.ActiveSigningKey(stored); !ok && r.cfg.Algorithm != AlgHS256 {
		if err := r.activateFirst(ctx, now); err != nil {
			return err
		}
	}
	r.secret = r.deploymentSecret()
	return r.Refresh(ctx)
}

// activateFirst makes the first local key the fleet's signer. Two gateways
// starting at once may both do so: the later one signs, and the other's
// tokens still verify everywhere.
func (r *Keyring) activateFirst(ctx context.Context, now time.Time) error {
	for _, id := range slices.Sorted(maps.Keys(r.local)) {
		if _, err := r.deps.Store.ActivateSigningKey(ctx, id, now); err == nil {
			r.deps.Log.Info("made a token signing key the signer", "kid", id)
			return nil
		} else if !errors.Is(err, upstream.ErrConflict) {
			return fmt.Errorf("signing: %w", err)
		}
	}
	return nil
}

// Refresh reads the key set from the store and, where it builds, makes it
// current. A set that does not build keeps the one in force.
func (r *Keyring) Refresh(ctx context.Context) error {
	stored, err := r.deps.Store.SigningKeys(ctx)
	if err != nil {
		return fmt.Errorf("signing: %w", err)
	}
	if r.cfg.KeyFiles == "" {
		if local, err := ReadKeyDir(r.cfg.KeyDir); err == nil {
			r.local = local // only Start and Run's goroutine write it, one after the other
		} else {
			r.deps.Log.Error("token key directory unreadable; keeping the keys read before", "err", err)
		}
	}
	set, err := buildKeySet(r.cfg.Algorithm, r.deps.HMAC, stored, r.local, time.Now())
	if err != nil {
		return fmt.Errorf("signing: %w", err)
	}
	old := r.current.Swap(set)
	if set.fallback != "" && (old == nil || old.fallback != set.fallback || old.signer.id != set.signer.id) {
		r.deps.Log.Warn("this gateway does not hold the fleet's signing key; signing with one of its own published keys",
			"fleet_kid", set.fallback, "kid", set.signer.id)
	}
	if old != nil && old.signer.id != set.signer.id {
		r.deps.Log.Info("token signing key changed", "kid", set.signer.id)
	}
	return nil
}

// Run refreshes the key set every Poll until ctx ends.
func (r *Keyring) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := r.Refresh(ctx); err != nil && ctx.Err() == nil {
				r.deps.Log.Error("token keys not refreshed; keeping the set in force", "err", err)
			}
		}
	}
}

// Current is the KeySet in force; nil before Start.
func (r *Keyring) Current() *KeySet { return r.current.Load() }

// DeploymentSecret is a secret that the gateways of a deployment share,
// for keys derived from it (the login limiter's pseudonyms): the last HS256
// key, else the private key of the first local key by kid, as at Start.
func (r *Keyring) DeploymentSecret() []byte { return r.secret }

func (r *Keyring) deploymentSecret() []byte {
	if n := len(r.deps.HMAC); n > 0 {
		return r.deps.HMAC[n-1].Secret
	}
	ids := slices.Sorted(maps.Keys(r.local))
	if len(ids) == 0 {
		return nil
	}
	der, err := x509.MarshalPKCS8PrivateKey(r.local[ids[0]].Private)
	if err != nil {
		return nil
	}
	return der
}
