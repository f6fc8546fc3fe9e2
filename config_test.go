package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/gateway"
	"github.com/realty-gateway/gateway/internal/settings"
)

// writeConfig writes a configuration file into a temporary directory and
// returns its path.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadConfigDefaults(t *testing.T) {
	tests := []struct {
		name string
		give map[string]string
	}{
		// The tests run in the repository root, so this reads
		// configs/gateway.yaml, which must repeat defaults() exactly.
		{name: "configs/gateway.yaml", give: map[string]string{}},
		{name: "configs/gateway.yaml named explicitly", give: map[string]string{"GATEWAY_CONFIG": defaultConfigFile}},
		{name: "empty file", give: map[string]string{"GATEWAY_CONFIG": writeConfig(t, "")}},
		{name: "file of comments", give: map[string]string{"GATEWAY_CONFIG": writeConfig(t, "# nothing set\n")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := loadConfig(tt.give)
			if err != nil {
				t.Fatalf("loadConfig(%v) error = %v", tt.give, err)
			}
			if want := defaults(); !reflect.DeepEqual(got, want) {
				t.Errorf("loadConfig(%v) =\n%+v\nwant defaults()\n%+v", tt.give, got, want)
			}
		})
	}
}

func TestLoadConfigWithoutDefaultFile(t *testing.T) {
	t.Chdir(t.TempDir()) // no configs/gateway.yaml here

	got, err := loadConfig(map[string]string{})
	if err != nil {
		t.Fatalf("loadConfig without configs/gateway.yaml: error = %v; want the built-in defaults", err)
	}
	if want := defaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("loadConfig without configs/gateway.yaml =\n%+v\nwant defaults()\n%+v", got, want)
	}
}

func TestLoadConfigMissingExplicitFile(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{name: "missing file", give: filepath.Join(t.TempDir(), "missing.yaml")},
		{name: "missing directory", give: filepath.Join(t.TempDir(), "no", "such", "gateway.yaml")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadConfig(map[string]string{"GATEWAY_CONFIG": tt.give})
			if !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("loadConfig(GATEWAY_CONFIG=%s) error = %v; want fs.ErrNotExist", tt.give, err)
			}
		})
	}
}

func TestLoadConfigFileThenEnvironment(t *testing.T) {
	file := writeConfig(t, "cache:\n  ttl: 90s\nbreaker:\n  minRequests: 7\n")
	tests := []struct {
		name string
		give map[string]string
		want func(*config)
	}{
		{
			name: "file alone",
			give: map[string]string{"GATEWAY_CONFIG": file},
			want: func(c *config) { c.Cache.Fresh = 90 * time.Second; c.Breaker.MinRequests = 7 },
		},
		{
			name: "environment over file",
			give: map[string]string{"GATEWAY_CONFIG": file, "GATEWAY_CACHE_TTL": "2m"},
			want: func(c *config) { c.Cache.Fresh = 2 * time.Minute; c.Breaker.MinRequests = 7 },
		},
		{
			name: "environment over defaults",
			give: map[string]string{"GATEWAY_CACHE_TTL": "2m", "GATEWAY_STORE_URL": "postgres://u:p@h/db"},
			want: func(c *config) { c.Cache.Fresh = 2 * time.Minute; c.Store.URL = "postgres://u:p@h/db" },
		},
		{
			name: "secrets from the environment",
			give: map[string]string{"GATEWAY_JWT_SECRET": "s3cret", "GATEWAY_JWT_KEYS": "a:b"},
			want: func(c *config) { c.HTTP.JWT.Secret = "s3cret"; c.HTTP.JWT.Keys = "a:b" },
		},
		{
			name: "variables without the prefix are ignored",
			give: map[string]string{"CACHE_TTL": "2m"},
			want: func(*config) {},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := defaults()
			tt.want(&want)

			got, err := loadConfig(tt.give)
			if err != nil {
				t.Fatalf("loadConfig(%v) error = %v", tt.give, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("loadConfig(%v) =\n%+v\nwant\n%+v", tt.give, got, want)
			}
		})
	}
}

func TestLoadConfigInvalid(t *testing.T) {
	tests := []struct {
		name    string
		give    map[string]string
		wantErr string
	}{
		{name: "unparsable duration", give: map[string]string{"GATEWAY_CACHE_TTL": "abc"}, wantErr: "GATEWAY_CACHE_TTL"},
		{name: "zero store timeout", give: map[string]string{"GATEWAY_STORE_TIMEOUT": "0s"}, wantErr: "store.timeout"},
		{name: "negative cache TTL", give: map[string]string{"GATEWAY_CACHE_TTL": "-1m"}, wantErr: "cache.ttl"},
		{name: "negative stale period", give: map[string]string{"GATEWAY_CACHE_STALE": "-1s"}, wantErr: "cache.stale"},
		{name: "failure ratio above 1", give: map[string]string{"GATEWAY_BREAKER_FAILURE_RATIO": "2"}, wantErr: "breaker failureRatio"},
		{name: "failure ratio 0", give: map[string]string{"GATEWAY_BREAKER_FAILURE_RATIO": "0"}, wantErr: "breaker failureRatio"},
		{name: "negative min requests", give: map[string]string{"GATEWAY_BREAKER_MIN_REQUESTS": "-1"}, wantErr: "GATEWAY_BREAKER_MIN_REQUESTS"},
		{name: "non-numeric body limit", give: map[string]string{"GATEWAY_BODY_LIMIT": "64k"}, wantErr: "GATEWAY_BODY_LIMIT"},
		{
			name:    "invalid value in the file",
			give:    map[string]string{"GATEWAY_CONFIG": writeConfig(t, "store:\n  timeout: 0s\n")},
			wantErr: "store.timeout",
		},
		{
			name:    "malformed file",
			give:    map[string]string{"GATEWAY_CONFIG": writeConfig(t, "cache:\n  ttl: [\n")},
			wantErr: "config ",
		},
		{
			name:    "wrong type in the file",
			give:    map[string]string{"GATEWAY_CONFIG": writeConfig(t, "cache:\n  ttl: soon\n")},
			wantErr: "config ",
		},
		{
			name:    "unknown key in the file",
			give:    map[string]string{"GATEWAY_CONFIG": writeConfig(t, "cacheTTL: 5m\n")},
			wantErr: "config ",
		},
		{
			name:    "empty issuer in the file",
			give:    map[string]string{"GATEWAY_CONFIG": writeConfig(t, "http:\n  jwt:\n    issuer: \"\"\n")},
			wantErr: "http.jwt.issuer",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadConfig(tt.give)
			if err == nil {
				t.Fatalf("loadConfig(%v) error = nil; want an error naming %s", tt.give, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("loadConfig(%v) error = %q; want it to name %s", tt.give, err, tt.wantErr)
			}
		})
	}
}

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
			cfg := defaults()
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
			cfg := defaults()
			cfg.Server.DataDir = tt.giveDataDir(t)
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

			other := defaults()
			other.Server.DataDir = t.TempDir()
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

func TestConfigLogValueMasksSecrets(t *testing.T) {
	const jwtKeys = "a:0123456789abcdef0123456789abcdef-keysecret"
	tests := []struct {
		name       string
		give       func(*config)
		want       map[string]string // logged members
		wantAbsent []string
	}{
		{
			name: "secrets and passwords",
			give: func(c *config) {
				c.HTTP.JWT.Secret = "supersecret-supersecret-supersecret"
				c.HTTP.JWT.Keys = jwtKeys
				c.Store.URL = "postgres://u:pgpass@h/db"
				c.Redis.URL = "redis://:redispass@h:6379/0"
				c.Purge.Header = "Authorization: Bearer purgetoken"
			},
			want: map[string]string{
				"http.jwt.secret": "***",
				"http.jwt.keys":   "***",
				"store.url":       "postgres://u:xxxxx@h/db",
				"redis.url":       "redis://:xxxxx@h:6379/0",
				"purge.header":    "***",
			},
			wantAbsent: []string{"supersecret", "keysecret", "pgpass", "redispass", "purgetoken"},
		},
		{
			name: "unset secrets stay visibly unset",
			give: func(*config) {},
			want: map[string]string{
				"http.jwt.secret": "",
				"http.jwt.keys":   "",
				"store.url":       "sqlite:data/gateway.db",
				"redis.url":       "",
			},
		},
		{
			name: "unparsable URL is masked whole",
			give: func(c *config) { c.Store.URL = "postgres://u:pgpass@h:port/db" },
			want: map[string]string{
				"store.url": "***",
			},
			wantAbsent: []string{"pgpass"},
		},
		{
			name: "other settings are logged as they are",
			give: func(c *config) { c.Cache.Fresh = 90 * time.Second; c.Server.Addr = ":9999" },
			want: map[string]string{
				"cache.ttl":       "1m30s",
				"server.addr":     ":9999",
				"http.jwt.issuer": "realty-gateway",
				"store.timeout":   "2s",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := defaults()
			tt.give(&cfg)
			var out bytes.Buffer
			slog.New(slog.NewJSONHandler(&out, nil)).Info("starting gateway", "config", cfg)

			for _, s := range tt.wantAbsent {
				if strings.Contains(out.String(), s) {
					t.Errorf("log contains %q:\n%s", s, out.String())
				}
			}
			var line struct {
				Config map[string]any `json:"config"`
			}
			if err := json.Unmarshal(out.Bytes(), &line); err != nil {
				t.Fatalf("log line %q: %v", out.String(), err)
			}
			if got, want := len(line.Config), len(settings.Walk(cfg, envPrefix)); got != want {
				t.Errorf("logged %d settings; want all %d", got, want)
			}
			for name, want := range tt.want {
				if got, ok := line.Config[name]; !ok || got != want {
					t.Errorf("logged %s = %#v; want %q", name, got, want)
				}
			}
		})
	}
}

// signingKeys is what serve does with the JWT settings: a generated secret
// when none is configured, then the gateway's parse.
func signingKeys(cfg *config, log *slog.Logger) ([]gateway.SigningKey, error) {
	if err := ensureJWTSecret(cfg, log); err != nil {
		return nil, err
	}
	return cfg.HTTP.JWT.SigningKeys()
}

// TestConfigFile checks configs/gateway.yaml against the components'
// Config types: every setting, its default, its variable and its meaning.
// GATEWAY_UPDATE_CONFIG=1 rewrites the file from them.
func TestConfigFile(t *testing.T) {
	var want bytes.Buffer
	if err := writeConfigFile(&want, defaults()); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("GATEWAY_UPDATE_CONFIG") == "1" {
		if err := os.WriteFile(defaultConfigFile, want.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(defaultConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("%s differs from the Config types; rewrite it with GATEWAY_UPDATE_CONFIG=1 go test -run TestConfigFile .\ngot:\n%s\nwant:\n%s",
			defaultConfigFile, got, want.Bytes())
	}
	// The generated file must load as the defaults, key by key.
	for _, s := range settings.Walk(defaults(), envPrefix) {
		if !bytes.Contains(want.Bytes(), []byte("# "+s.Env+": ")) || s.Help == "" {
			t.Errorf("setting %s (%s) is not documented", s.Path, s.Env)
		}
	}
}

func TestHelpListsEverySetting(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, map[string]string{"GATEWAY_CONFIG": "/nonexistent"}, nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, s := range settings.Walk(defaults(), envPrefix) {
		if !strings.Contains(out.String(), s.Env+" ") {
			t.Errorf("--help does not list %s", s.Env)
		}
	}
}
