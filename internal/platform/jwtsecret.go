package platform

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/realty-gateway/gateway/internal/config"
	"github.com/realty-gateway/gateway/internal/settings"
	"github.com/realty-gateway/gateway/signing"
)

// EnsureJWTSecret resolves which algorithm signs (Config.SigningConfig)
// and gives cfg the HS256 secret it needs. HS256 without a secret takes one generated once into the
// data directory, so that tokens survive a restart; an asymmetric
// algorithm takes the secret generated there before, if any, so that the
// tokens it signed verify until they expire, and generates none.
func EnsureJWTSecret(cfg *config.Config, log *slog.Logger) error {
	jwt := &cfg.HTTP.JWT
	jwt.Algorithm = cfg.SigningConfig().Algorithm
	if jwt.Keys != "" || jwt.Secret != "" {
		return nil
	}
	if jwt.Algorithm != signing.AlgHS256 {
		b, err := os.ReadFile(filepath.Join(cfg.Server.DataDir, "jwt-secret"))
		if err == nil {
			log.Warn("the HS256 secret generated in the data directory verifies the tokens it signed, and signs no more; delete its file one token lifetime after the upgrade",
				"alg", jwt.Algorithm, "file", filepath.Join(cfg.Server.DataDir, "jwt-secret"))
			jwt.Secret = settings.Secret(strings.TrimSpace(string(b)))
		}
		return nil
	}
	sec, err := generatedSecret(cfg.Server.DataDir)
	if err != nil {
		return err
	}
	log.Warn("no JWT secret configured; using the one generated in the data directory", "dir", cfg.Server.DataDir)
	jwt.Secret = settings.Secret(sec)
	return nil
}

func generatedSecret(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "jwt-secret")
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("data directory: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("jwt secret: %w", err)
	}
	sec := hex.EncodeToString(raw)
	// Write it whole under a temporary name, then link it into place, so
	// that no process ever reads a half-written or empty secret.
	tmp, err := os.CreateTemp(dataDir, "jwt-secret-*")
	if err != nil {
		return "", fmt.Errorf("jwt secret file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := os.Chmod(tmp.Name(), 0o600); err != nil {
		tmp.Close()
		return "", fmt.Errorf("jwt secret file: %w", err)
	}
	if _, err := tmp.WriteString(sec + "\n"); err != nil {
		tmp.Close()
		return "", fmt.Errorf("jwt secret file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("jwt secret file: %w", err)
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, os.ErrExist) {
		// Another process won the race; use its secret.
		b, err := os.ReadFile(path)
		return strings.TrimSpace(string(b)), err
	} else if err != nil {
		return "", fmt.Errorf("jwt secret file: %w", err)
	}
	return sec, nil
}
