package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

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
	inRepositoryRoot(t)
	tests := []struct {
		name string
		give map[string]string
	}{
		// The tests run in the repository root, so this reads
		// configs/gateway.yaml, which must repeat Defaults() exactly.
		{name: "configs/gateway.yaml", give: map[string]string{}},
		{name: "configs/gateway.yaml named explicitly", give: map[string]string{"GATEWAY_CONFIG": defaultFile}},
		{name: "empty file", give: map[string]string{"GATEWAY_CONFIG": writeConfig(t, "")}},
		{name: "file of comments", give: map[string]string{"GATEWAY_CONFIG": writeConfig(t, "# nothing set\n")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Load(tt.give)
			if err != nil {
				t.Fatalf("Load(%v) error = %v", tt.give, err)
			}
			if want := Defaults(); !reflect.DeepEqual(got, want) {
				t.Errorf("Load(%v) =\n%+v\nwant Defaults()\n%+v", tt.give, got, want)
			}
		})
	}
}

func TestLoadConfigWithoutDefaultFile(t *testing.T) {
	t.Chdir(t.TempDir()) // no configs/gateway.yaml here

	got, err := Load(map[string]string{})
	if err != nil {
		t.Fatalf("loadConfig without configs/gateway.yaml: error = %v; want the built-in defaults", err)
	}
	if want := Defaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("loadConfig without configs/gateway.yaml =\n%+v\nwant Defaults()\n%+v", got, want)
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
			_, err := Load(map[string]string{"GATEWAY_CONFIG": tt.give})
			if !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Load(GATEWAY_CONFIG=%s) error = %v; want fs.ErrNotExist", tt.give, err)
			}
		})
	}
}

func TestLoadConfigFileThenEnvironment(t *testing.T) {
	inRepositoryRoot(t)
	file := writeConfig(t, "cache:\n  ttl: 90s\nbreaker:\n  minRequests: 7\n")
	tests := []struct {
		name string
		give map[string]string
		want func(*Config)
	}{
		{
			name: "file alone",
			give: map[string]string{"GATEWAY_CONFIG": file},
			want: func(c *Config) { c.Cache.Fresh = 90 * time.Second; c.Breaker.MinRequests = 7 },
		},
		{
			name: "environment over file",
			give: map[string]string{"GATEWAY_CONFIG": file, "GATEWAY_CACHE_TTL": "2m"},
			want: func(c *Config) { c.Cache.Fresh = 2 * time.Minute; c.Breaker.MinRequests = 7 },
		},
		{
			name: "environment over defaults",
			give: map[string]string{"GATEWAY_CACHE_TTL": "2m", "GATEWAY_STORE_URL": "postgres://u:p@h/db"},
			want: func(c *Config) { c.Cache.Fresh = 2 * time.Minute; c.Store.URL = "postgres://u:p@h/db" },
		},
		{
			name: "secrets from the environment",
			give: map[string]string{"GATEWAY_JWT_SECRET": "s3cret", "GATEWAY_JWT_KEYS": "a:b"},
			want: func(c *Config) { c.HTTP.JWT.Secret = "s3cret"; c.HTTP.JWT.Keys = "a:b" },
		},
		{
			name: "variables without the prefix are ignored",
			give: map[string]string{"CACHE_TTL": "2m"},
			want: func(*Config) {},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := Defaults()
			tt.want(&want)

			got, err := Load(tt.give)
			if err != nil {
				t.Fatalf("Load(%v) error = %v", tt.give, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Load(%v) =\n%+v\nwant\n%+v", tt.give, got, want)
			}
		})
	}
}

func TestLoadConfigInvalid(t *testing.T) {
	inRepositoryRoot(t)
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
			name:    "empty admin address in the file",
			give:    map[string]string{"GATEWAY_CONFIG": writeConfig(t, "server:\n  adminAddr: \"\"\n")},
			wantErr: "server.adminAddr",
		},
		{name: "address without a port", give: map[string]string{"GATEWAY_ADDR": "8080"}, wantErr: "server.addr"},
		{
			name:    "empty issuer in the file",
			give:    map[string]string{"GATEWAY_CONFIG": writeConfig(t, "http:\n  jwt:\n    issuer: \"\"\n")},
			wantErr: "http.jwt.issuer",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.give)
			if err == nil {
				t.Fatalf("Load(%v) error = nil; want an error naming %s", tt.give, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Load(%v) error = %q; want it to name %s", tt.give, err, tt.wantErr)
			}
		})
	}
}

func TestConfigLogValueMasksSecrets(t *testing.T) {
	const jwtKeys = "a:0123456789abcdef0123456789abcdef-keysecret"
	tests := []struct {
		name       string
		give       func(*Config)
		want       map[string]string // logged members
		wantAbsent []string
	}{
		{
			name: "secrets and passwords",
			give: func(c *Config) {
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
			give: func(*Config) {},
			want: map[string]string{
				"http.jwt.secret": "",
				"http.jwt.keys":   "",
				"store.url":       "sqlite:data/gateway.db",
				"redis.url":       "",
			},
		},
		{
			name: "unparsable URL is masked whole",
			give: func(c *Config) { c.Store.URL = "postgres://u:pgpass@h:port/db" },
			want: map[string]string{
				"store.url": "***",
			},
			wantAbsent: []string{"pgpass"},
		},
		{
			name: "other settings are logged as they are",
			give: func(c *Config) { c.Cache.Fresh = 90 * time.Second; c.Server.Addr = ":9999" },
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
			cfg := Defaults()
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
			if got, want := len(line.Config), len(settings.Walk(cfg, EnvPrefix)); got != want {
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

// TestConfigFile checks configs/gateway.yaml against the components'
// Config types: every setting, its default, its variable and its meaning.
// GATEWAY_UPDATE_CONFIG=1 rewrites the file from them.
func TestConfigFile(t *testing.T) {
	inRepositoryRoot(t)
	var want bytes.Buffer
	if err := writeConfigFile(&want, Defaults()); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("GATEWAY_UPDATE_CONFIG") == "1" {
		if err := os.WriteFile(defaultFile, want.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(defaultFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("%s differs from the Config types; rewrite it with GATEWAY_UPDATE_CONFIG=1 go test -run TestConfigFile ./internal/config\ngot:\n%s\nwant:\n%s",
			defaultFile, got, want.Bytes())
	}
	// The generated file must load as the defaults, key by key.
	for _, s := range settings.Walk(Defaults(), EnvPrefix) {
		if !bytes.Contains(want.Bytes(), []byte("# "+s.Env+": ")) || s.Help == "" {
			t.Errorf("setting %s (%s) is not documented", s.Path, s.Env)
		}
	}
}

// inRepositoryRoot runs the rest of t in the repository root, where the
// binary's default configs/gateway.yaml lies.
func inRepositoryRoot(t *testing.T) {
	t.Chdir(filepath.Join("..", ".."))
}

// configFileHeader opens configs/gateway.yaml.
const configFileHeader = `# Configuration of the realty gateway. Every value here is the built-in
# default; GATEWAY_<NAME> environment variables override them, as named on
# each line. GATEWAY_CONFIG names another file. Durations use Go syntax:
# 90s, 5m, 1h. Generated from the components' Config types:
# GATEWAY_UPDATE_CONFIG=1 go test -run TestConfigFile ./internal/config rewrites it.
`

// writeConfigFile writes cfg as configs/gateway.yaml is written: one group
// per component, each setting with its variable and meaning.
func writeConfigFile(w io.Writer, cfg Config) error {
	var b strings.Builder
	b.WriteString(configFileHeader)
	var open []string // the group levels written so far
	for _, s := range settings.Walk(cfg, EnvPrefix) {
		levels := strings.Split(s.Path, ".")
		groups, key := levels[:len(levels)-1], levels[len(levels)-1]
		n := 0
		for n < len(open) && n < len(groups) && open[n] == groups[n] {
			n++
		}
		if n == 0 {
			b.WriteString("\n")
		}
		for i := n; i < len(groups); i++ {
			fmt.Fprintf(&b, "%s%s:\n", indent(i), groups[i])
		}
		open = groups
		line := indent(len(groups)) + key + ": " + yamlValue(s.Value)
		fmt.Fprintf(&b, "%-38s # %s: %s\n", line, s.Env, s.Help)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func indent(level int) string { return strings.Repeat("  ", level) }

// TestCDNControlHeader: the CDN's rules go in the header the purged CDN
// reads, unless the setting names one.
func TestCDNControlHeader(t *testing.T) {
	inRepositoryRoot(t)
	tests := []struct {
		give map[string]string
		want string
	}{
		{map[string]string{}, "CDN-Cache-Control"},
		{map[string]string{"GATEWAY_CDN_PURGE_FORMAT": "varnish-xkey"}, "CDN-Cache-Control"},
		{map[string]string{"GATEWAY_CDN_PURGE_FORMAT": "cloudflare"}, "CDN-Cache-Control"},
		{map[string]string{"GATEWAY_CDN_PURGE_FORMAT": "fastly"}, "Surrogate-Control"},
		{map[string]string{"GATEWAY_CDN_PURGE_FORMAT": "fastly", "GATEWAY_CDN_CONTROL_HEADER": "CDN-Cache-Control"}, "CDN-Cache-Control"},
		{map[string]string{"GATEWAY_CDN_CONTROL_HEADER": "Cloudflare-CDN-Cache-Control"}, "Cloudflare-CDN-Cache-Control"},
	}
	for _, tt := range tests {
		cfg, err := Load(tt.give)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.GatewayConfig().CDN.ControlHeader; got != tt.want {
			t.Errorf("%v: control header %q, want %q", tt.give, got, tt.want)
		}
	}
	if _, err := Load(map[string]string{"GATEWAY_CDN_CONTROL_HEADER": "Cache-Control"}); err == nil || !strings.Contains(err.Error(), "http.cdn.controlHeader") {
		t.Errorf("GATEWAY_CDN_CONTROL_HEADER=Cache-Control: error %v; want one naming http.cdn.controlHeader", err)
	}
}

func TestRedisModeIsValidated(t *testing.T) {
	c := defaultRedis()
	c.Mode = "clustered"
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), "single, cluster or sentinel") {
		t.Fatalf("validate = %v", err)
	}
}

func TestTracingSettings(t *testing.T) {
	tests := []struct {
		name    string
		give    Tracing
		environ map[string]string
		wantOn  bool
		wantErr string
	}{
		{name: "off by default"},
		{name: "our endpoint", give: Tracing{OTLPEndpoint: "http://collector:4318"}, wantOn: true},
		{name: "the standard endpoint", environ: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, wantOn: true},
		{name: "the standard traces endpoint", environ: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, wantOn: true},
		{name: "SDK disabled", give: Tracing{OTLPEndpoint: "http://collector:4318"}, environ: map[string]string{"OTEL_SDK_DISABLED": "TRUE"}},
		{name: "not http", give: Tracing{OTLPEndpoint: "collector:4318"}, wantOn: true, wantErr: "http:// or https://"},
		{name: "credentials in the URL", give: Tracing{OTLPEndpoint: "https://user:pw@collector:4318"}, wantOn: true, wantErr: "OTEL_EXPORTER_OTLP_HEADERS"},
		{name: "credentials in the standard URL", environ: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://user:pw@c:4318"}, wantOn: true, wantErr: "OTEL_EXPORTER_OTLP_HEADERS"},
		{name: "headers that do not parse", environ: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer pw@,junk"}, wantErr: "OTEL_EXPORTER_OTLP_HEADERS: pair 2"},
		{name: "a timeout that is not milliseconds", environ: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "5s"}, wantErr: "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"},
		{name: "an unknown compression", environ: map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}, wantErr: "gzip or none"},
		{name: "a client key without its certificate", environ: map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_KEY": "k.pem"}, wantErr: "go together"},
		{name: "bad settings while the SDK is disabled", give: Tracing{OTLPEndpoint: "collector:4317"}, environ: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_HEADERS": "junk"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.give.fromEnviron(tt.environ); err != nil {
				if tt.wantErr == "" || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("fromEnviron() = %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "pw@") || strings.Contains(err.Error(), "5s") {
					t.Errorf("the error repeats a value: %v", err)
				}
				return
			}
			if got := tt.give.On(); got != tt.wantOn {
				t.Errorf("On() = %v, want %v", got, tt.wantOn)
			}
			err := tt.give.validate()
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("validate() = %v, want %q", err, tt.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "pw@") {
				t.Errorf("the error repeats the credentials: %v", err)
			}
		})
	}
}

// TestTracingExport checks where spans go and how, from the standard
// variables: a traces-only variable wins over the general one, and the
// gateway's own endpoint over both.
func TestTracingExport(t *testing.T) {
	tests := []struct {
		name    string
		give    Tracing
		environ map[string]string
		want    OTLPExport
	}{
		{name: "defaults", environ: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
			want: OTLPExport{URL: "http://c:4318/v1/traces", Timeout: 10 * time.Second}},
		{name: "the traces endpoint as it is", environ: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/x"},
			want: OTLPExport{URL: "http://t:1/x", Timeout: 10 * time.Second}},
		{name: "ours first", give: Tracing{OTLPEndpoint: "https://g:4318"}, environ: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/x"},
			want: OTLPExport{URL: "https://g:4318/v1/traces", Timeout: 10 * time.Second}},
		{name: "headers, timeout, gzip, certificates", give: Tracing{OTLPEndpoint: "https://g:4318"}, environ: map[string]string{
			"OTEL_EXPORTER_OTLP_HEADERS":            "Authorization=Bearer%20t0k, X-Tenant = a%2Cb",
			"OTEL_EXPORTER_OTLP_TRACES_HEADERS":     "X-Only=traces",
			"OTEL_EXPORTER_OTLP_TIMEOUT":            "2500",
			"OTEL_EXPORTER_OTLP_COMPRESSION":        "GZIP",
			"OTEL_EXPORTER_OTLP_CERTIFICATE":        "ca.pem",
			"OTEL_EXPORTER_OTLP_CLIENT_KEY":         "k.pem",
			"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": "c.pem",
		}, want: OTLPExport{URL: "https://g:4318/v1/traces", Headers: map[string]string{"X-Only": "traces"}, Timeout: 2500 * time.Millisecond,
			Gzip: true, CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem"}},
		{name: "general headers", environ: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20t0k, X-Tenant = a%2Cb,"},
			want: OTLPExport{URL: "http://c/v1/traces", Headers: map[string]string{"Authorization": "Bearer t0k", "X-Tenant": "a,b"}, Timeout: 10 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.give.fromEnviron(tt.environ); err != nil {
				t.Fatal(err)
			}
			if got := tt.give.Export(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Export() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestTracesURL(t *testing.T) {
	tests := []struct{ give, want string }{
		{give: "http://collector:4318", want: "http://collector:4318/v1/traces"},
		{give: "http://collector:4318/", want: "http://collector:4318/v1/traces"},
		{give: "https://otel.example/otlp", want: "https://otel.example/otlp/v1/traces"},
		{give: "http://collector:4318/v1/traces", want: "http://collector:4318/v1/traces"},
	}
	for _, tt := range tests {
		if got := tracesURL(tt.give); got != tt.want {
			t.Errorf("tracesURL(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
}
