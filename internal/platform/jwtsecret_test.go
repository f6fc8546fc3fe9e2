package platform

import (
	"github.com/realty-gateway/gateway/signing"
	"github.com/realty-gateway/gateway/upstream"

	"bytes"
	"encoding/hex"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/realty-gateway/gateway/gateway"
	"github.com/realty-gateway/gateway/internal/config"
	"github.com/realty-gateway/gateway/internal/settings"
)

func TestSigningKeys(t *testing.T) {
	var (
		secretA = strings.Repeat("a", gateway.MinSecretBytes)
		secretB = strings.Repeat("b", gateway.MinSecretBytes+8)
		short   = strings.Repeat("c", gateway.MinSecretBytes-1)
	)
	tests := []struct {
		name     string
		giveKeys string
		giveSec  string
		want     []gateway.SigningKey
		wantErr  string
	}{
		{
			name:     "keys in order, the first signs",
			giveKeys: "new:" + secretA + ",default:" + secretB,
			want:     []gateway.SigningKey{{ID: "new", Secret: []byte(secretA)}, {ID: "default", Secret: []byte(secretB)}},
		},
		{
			name:     "spaces around entries",
			giveKeys: " new:" + secretA + " , default:" + secretB + " ",
			want:     []gateway.SigningKey{{ID: "new", Secret: []byte(secretA)}, {ID: "default", Secret: []byte(secretB)}},
		},
		{
			name:     "a secret may contain colons",
			giveKeys: "k:" + secretA + ":x",
			want:     []gateway.SigningKey{{ID: "k", Secret: []byte(secretA + ":x")}},
		},
		{
			name:     "keys win over the secret",
			giveKeys: "new:" + secretA,
			giveSec:  secretB,
			want:     []gateway.SigningKey{{ID: "new", Secret: []byte(secretA)}},
		},
		{
			name:    "secret alone has kid default",
			giveSec: secretA,
			want:    []gateway.SigningKey{{ID: "default", Secret: []byte(secretA)}},
		},
		{name: "short secret in keys", giveKeys: "new:" + secretA + ",old:" + short, wantErr: "entry 2"},
		{name: "duplicate kid", giveKeys: "k:" + secretA + ",k:" + secretB, wantErr: "entry 2"},
		{name: "entry without colon", giveKeys: "new" + secretA, wantErr: "entry 1"},
		{name: "empty kid", giveKeys: ":" + secretA, wantErr: "entry 1"},
		{name: "empty entry", giveKeys: "new:" + secretA + ",", wantErr: "entry 2"},
		{name: "short secret", giveSec: short, wantErr: "shorter than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dataDir := t.TempDir()
			cfg := config.Defaults()
			cfg.Server.DataDir, cfg.HTTP.JWT.Keys, cfg.HTTP.JWT.Secret = dataDir, settings.Secret(tt.giveKeys), settings.Secret(tt.giveSec)

			got, err := signingKeys(&cfg, slog.New(slog.DiscardHandler))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("signingKeys() error = %v; want one containing %q", err, tt.wantErr)
				}
				for _, s := range []string{secretA, secretB, short} {
					if strings.Contains(err.Error(), s) {
						t.Errorf("signingKeys() error %q repeats a configured secret", err)
					}
				}
			} else {
				if err != nil {
					t.Fatalf("signingKeys() error = %v", err)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("signingKeys() = %q; want %q", got, tt.want)
				}
			}
			if _, err := os.Stat(filepath.Join(dataDir, "jwt-secret")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("with a configured secret, DataDir/jwt-secret: stat error = %v; want it not written", err)
			}
		})
	}
}

func TestSigningKeysGeneratedSecret(t *testing.T) {
	tests := []struct {
		name        string
		giveDataDir func(t *testing.T) string
	}{
		{name: "existing data directory", giveDataDir: func(t *testing.T) string { return t.TempDir() }},
		{name: "missing data directory", giveDataDir: func(t *testing.T) string { return filepath.Join(t.TempDir(), "a", "b") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Defaults()
			cfg.Server.DataDir = tt.giveDataDir(t)
			cfg.HTTP.JWT.Algorithm = signing.AlgHS256
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))

			first, err := signingKeys(&cfg, log)
			if err != nil {
				t.Fatalf("signingKeys() error = %v", err)
			}
			if len(first) != 1 || first[0].ID != "default" || len(first[0].Secret) < gateway.MinSecretBytes {
				t.Fatalf("signingKeys() = %q; want one key with ID default and at least %d bytes", first, gateway.MinSecretBytes)
			}
			if _, err := hex.DecodeString(string(first[0].Secret)); err != nil {
				t.Errorf("generated secret %q is not hex: %v", first[0].Secret, err)
			}

			path := filepath.Join(cfg.Server.DataDir, "jwt-secret")
			info, err := os.Stat(path)
			if err != nil {
				t.Fatalf("stat %s: %v", path, err)
			}
			if mode := info.Mode().Perm(); mode != 0o600 {
				t.Errorf("%s mode = %v; want 0600", path, mode)
			}
			if b, err := os.ReadFile(path); err != nil || strings.TrimSpace(string(b)) != string(first[0].Secret) {
				t.Errorf("%s holds %q, %v; want the generated secret", path, b, err)
			}
			if !strings.Contains(logs.String(), "no JWT secret configured") {
				t.Errorf("log = %q; want a warning about the generated secret", logs.String())
			}
			if strings.Contains(logs.String(), string(first[0].Secret)) {
				t.Errorf("log %q contains the generated secret", logs.String())
			}

			second, err := signingKeys(&cfg, log)
			if err != nil {
				t.Fatalf("second signingKeys() error = %v", err)
			}
			if !reflect.DeepEqual(second, first) {
				t.Errorf("second signingKeys() = %q; want the first one's %q", second, first)
			}

			other := config.Defaults()
			other.Server.DataDir = t.TempDir()
			other.HTTP.JWT.Algorithm = signing.AlgHS256
			third, err := signingKeys(&other, log)
			if err != nil {
				t.Fatalf("signingKeys() in another data directory: error = %v", err)
			}
			if bytes.Equal(third[0].Secret, first[0].Secret) {
				t.Errorf("two data directories got the same generated secret %q; want random secrets", first[0].Secret)
			}
		})
	}
}

// signingKeys is what serve does with the JWT settings: a generated secret
// when none is configured, then the gateway's parse.
// TestAsymmetricDefaultKeepsTheGeneratedSecret: a new install signs with
// ES256 and generates no HS256 secret; one that generated a secret before
// keeps it to verify the tokens it signed, and HS256 no longer signs.
func TestAsymmetricDefaultKeepsTheGeneratedSecret(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	cfg := config.Defaults()
	cfg.Server.DataDir = t.TempDir()
	keys, err := signingKeys(&cfg, log)
	if err != nil || len(keys) != 0 || cfg.HTTP.JWT.Algorithm != upstream.SigningAlgES256 {
		t.Fatalf("new install: keys %q, algorithm %q, err %v; want no HS256 key and ES256", keys, cfg.HTTP.JWT.Algorithm, err)
	}
	if _, err := os.Stat(filepath.Join(cfg.Server.DataDir, "jwt-secret")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("new install wrote a jwt-secret: %v", err)
	}
	const old = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	dir := cfg.Server.DataDir
	cfg = config.Defaults()
	cfg.Server.DataDir = dir
	if err := os.WriteFile(filepath.Join(cfg.Server.DataDir, "jwt-secret"), []byte(old+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err = signingKeys(&cfg, log)
	if err != nil || len(keys) != 1 || string(keys[0].Secret) != old || cfg.HTTP.JWT.Algorithm != upstream.SigningAlgES256 {
		t.Fatalf("upgraded install: keys %q, algorithm %q, err %v; want the old secret verifying and ES256 signing", keys, cfg.HTTP.JWT.Algorithm, err)
	}
}

func signingKeys(cfg *config.Config, log *slog.Logger) ([]gateway.SigningKey, error) {
	if err := EnsureJWTSecret(cfg, log); err != nil {
		return nil, err
	}
	return cfg.HTTP.JWT.SigningKeys()
}
