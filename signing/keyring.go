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
	// StoreTimeout bounds each store call; 0: 5 s.
	StoreTimeout time.Duration
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
	if deps.StoreTimeout <= 0 {
		deps.StoreTimeout = 5 * time.Second
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
// makes one the signer where the fleet has none, and reads the set. It
// fails where no key of this gateway may sign.
func (r *Keyring) Start(ctx context.Context) error {
	now := time.Now()
	if r.asymmetric() && len(r.local) == 0 && r.cfg.KeyFiles == "" {
		if _, err := r.generate(ctx); err != nil {
			return err
		}
	}
	for _, id := range slices.Sorted(maps.Keys(r.local)) {
		if _, err := r.addKey(ctx, r.local[id], now); err != nil {
			return fmt.Errorf("signing: publish key %s of %s: %w", id, r.local[id].File, err)
		}
	}
	stored, err := r.storedKeys(ctx)
	if err != nil {
		return fmt.Errorf("signing: %w", err)
	}
	if _, ok := upstream.ActiveSigningKey(stored); !ok && r.asymmetric() {
		if err := r.activateFirst(ctx, now); err != nil {
			return err
		}
	}
	r.secret = r.deploymentSecret()
	if err := r.Refresh(ctx); err != nil {
		return err
	}
	if kid, _ := r.Current().Signer(); kid == "" {
		return errors.New("signing: no published key of this gateway can sign: none is held, or all are retired")
	}
	return nil
}

func (r *Keyring) asymmetric() bool { return r.cfg.Algorithm != AlgHS256 }

// generate makes a key in KeyDir and publishes it: a key never signs
// before it is published.
func (r *Keyring) generate(ctx context.Context) (LocalKey, error) {
	k, err := GenerateKeyFile(r.cfg.KeyDir, r.cfg.Algorithm)
	if err != nil {
		return LocalKey{}, fmt.Errorf("signing: %w", err)
	}
	if _, err := r.addKey(ctx, k, time.Now()); err != nil {
		return LocalKey{}, fmt.Errorf("signing: publish key %s of %s: %w", k.ID, k.File, err)
	}
	r.deps.Log.Info("generated a token signing key", "kid", k.ID, "alg", k.Alg, "file", k.File)
	if r.local == nil {
		r.local = map[string]LocalKey{}
	}
	r.local[k.ID] = k
	return k, nil
}

// activateFirst makes the first local key the fleet's signer. Two gateways
// starting at once may both do so: the later one signs, and the other's
// tokens still verify everywhere.
func (r *Keyring) activateFirst(ctx context.Context, now time.Time) error {
	for _, id := range slices.Sorted(maps.Keys(r.local)) {
		if err := r.activate(ctx, id, now); err == nil {
			r.deps.Log.Info("made a token signing key the signer", "kid", id)
			return nil
		} else if !errors.Is(err, upstream.ErrConflict) {
			return fmt.Errorf("signing: %w", err)
		}
	}
	return nil
}

// Refresh reads the key set from the store and makes it current; a set
// that does not build keeps the one in force. Where none of this
// gateway's keys may sign any more (its keys were retired), it generates
// and publishes a new one in KeyDir; with KeyFiles, logins fail until a
// key file that may sign is given.
func (r *Keyring) Refresh(ctx context.Context) error {
	if r.cfg.KeyFiles == "" {
		if local, err := ReadKeyDir(r.cfg.KeyDir); err == nil {
			r.local = local // only Start and Run's goroutine write it, one after the other
		} else {
			r.deps.Log.Error("token key directory unreadable; keeping the keys read before", "err", err)
		}
	}
	set, err := r.build(ctx)
	if err != nil {
		return err
	}
	if kid, _ := set.Signer(); kid == "" && r.asymmetric() && r.cfg.KeyFiles == "" {
		if _, err := r.generate(ctx); err != nil {
			return err
		}
		if set, err = r.build(ctx); err != nil {
			return err
		}
	}
	r.swap(set)
	return nil
}

// build reads the store's key set and builds a KeySet of it.
func (r *Keyring) build(ctx context.Context) (*KeySet, error) {
	stored, err := r.storedKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	set, skipped, err := buildKeySet(r.cfg.Algorithm, r.deps.HMAC, stored, r.local, time.Now())
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	for _, err := range skipped {
		r.deps.Log.Error("a stored token key cannot verify; left out of the key set", "err", err)
	}
	return set, nil
}

// The store calls, each within the store's timeout.

func (r *Keyring) storedKeys(ctx context.Context) ([]upstream.SigningKey, error) {
	ctx, cancel := context.WithTimeout(ctx, r.deps.StoreTimeout)
	defer cancel()
	return r.deps.Store.SigningKeys(ctx)
}

func (r *Keyring) addKey(ctx context.Context, k LocalKey, at time.Time) (upstream.SigningKey, error) {
	ctx, cancel := context.WithTimeout(ctx, r.deps.StoreTimeout)
	defer cancel()
	return r.deps.Store.AddSigningKey(ctx, k.published(), at)
}

func (r *Keyring) activate(ctx context.Context, kid string, at time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, r.deps.StoreTimeout)
	defer cancel()
	_, err := r.deps.Store.ActivateSigningKey(ctx, kid, at)
	return err
}

// swap makes set current and says what changed.
func (r *Keyring) swap(set *KeySet) {
	old := r.current.Swap(set)
	kid, _ := set.Signer()
	switch {
	case kid == "" && (old == nil || old.signer.id != ""):
		r.deps.Log.Error("no key of this gateway may sign: logins fail until a key file that may sign is given")
	case kid == "":
	case set.fallback != "" && (old == nil || old.fallback != set.fallback || old.signer.id != kid):
		r.deps.Log.Warn("this gateway does not hold the fleet's signing key; signing with one of its own published keys",
			"fleet_kid", set.fallback, "kid", kid)
	case old != nil && old.signer.id != kid:
		r.deps.Log.Info("token signing key changed", "kid", kid)
	}
}

// Run refreshes the key set every Poll until ctx ends. A failing refresh
// is logged when it starts failing and when it recovers.
func (r *Keyring) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Poll)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			err := r.Refresh(ctx)
			switch {
			case err != nil && ctx.Err() == nil && !failing:
				r.deps.Log.Error("token keys not refreshed; keeping the set in force", "err", err)
				failing = true
			case err == nil && failing:
				r.deps.Log.Info("token keys refreshed again")
				failing = false
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
