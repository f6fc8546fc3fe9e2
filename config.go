package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"go.yaml.in/yaml/v3"

	"github.com/realty-gateway/gateway/gateway"
)

const defaultConfigFile = "configs/gateway.yaml"

// secret is a configuration value that is never logged.
type secret string

func (s secret) LogValue() slog.Value {
	if s == "" {
		return slog.StringValue("")
	}
	return slog.StringValue("***")
}

// dsn is a connection URL; its password is never logged.
type dsn string

func (d dsn) LogValue() slog.Value {
	u, err := url.Parse(string(d))
	if err != nil {
		return slog.StringValue("***")
	}
	q := u.Query()
	for name := range q {
		switch strings.ToLower(name) {
		case "password", "sslpassword", "sslkey", "token", "key", "secret":
			q.Set(name, "xxxxx")
		}
	}
	u.RawQuery = q.Encode()
	return slog.StringValue(u.Redacted())
}

// LogValue lists every setting, with secrets masked.
func (c config) LogValue() slog.Value {
	v := reflect.ValueOf(c)
	attrs := make([]slog.Attr, 0, v.NumField())
	for i := range v.NumField() {
		name, value := v.Type().Field(i).Tag.Get("yaml"), v.Field(i).Interface()
		if d, ok := value.(time.Duration); ok {
			value = d.String()
		}
		attrs = append(attrs, slog.Any(name, value))
	}
	return slog.GroupValue(attrs...)
}

// config is the whole configuration: configs/gateway.yaml (or the file
// GATEWAY_CONFIG names), then GATEWAY_* environment variables over it.
// It is parsed once in main and passed down as values.
type config struct {
	Addr        string `yaml:"addr" env:"ADDR"`
	AdminAddr   string `yaml:"adminAddr" env:"ADMIN_ADDR"`
	DataDir     string `yaml:"dataDir" env:"DATA_DIR"`
	StoreURL    dsn    `yaml:"storeURL" env:"STORE_URL"`
	RedisURL    dsn    `yaml:"redisURL" env:"REDIS_URL"`
	RedisPrefix string `yaml:"redisPrefix" env:"REDIS_PREFIX"`

	JWTSecret   secret        `yaml:"jwtSecret" env:"JWT_SECRET"`
	JWTKeys     secret        `yaml:"jwtKeys" env:"JWT_KEYS"`
	JWTIssuer   string        `yaml:"jwtIssuer" env:"JWT_ISSUER"`
	JWTAudience string        `yaml:"jwtAudience" env:"JWT_AUDIENCE"`
	TokenTTL    time.Duration `yaml:"tokenTTL" env:"TOKEN_TTL"`
	JWTLeeway   time.Duration `yaml:"jwtLeeway" env:"JWT_LEEWAY"`

	CacheTTL       time.Duration `yaml:"cacheTTL" env:"CACHE_TTL"`
	CacheStale     time.Duration `yaml:"cacheStale" env:"CACHE_STALE"`
	NegativeTTL    time.Duration `yaml:"negativeTTL" env:"NEGATIVE_TTL"`
	LocalCacheSize int           `yaml:"localCacheSize" env:"LOCAL_CACHE_SIZE"`
	StoreTimeout   time.Duration `yaml:"storeTimeout" env:"STORE_TIMEOUT"`
	RedisTimeout   time.Duration `yaml:"redisTimeout" env:"REDIS_TIMEOUT"`

	StoreConcurrency    int           `yaml:"storeConcurrency" env:"STORE_CONCURRENCY"`
	PostgresMaxConns    int32         `yaml:"postgresMaxConns" env:"POSTGRES_MAX_CONNS"`
	BreakerWindow       time.Duration `yaml:"breakerWindow" env:"BREAKER_WINDOW"`
	BreakerBucket       time.Duration `yaml:"breakerBucket" env:"BREAKER_BUCKET"`
	BreakerMinRequests  uint32        `yaml:"breakerMinRequests" env:"BREAKER_MIN_REQUESTS"`
	BreakerFailureRatio float64       `yaml:"breakerFailureRatio" env:"BREAKER_FAILURE_RATIO"`
	BreakerOpenFor      time.Duration `yaml:"breakerOpenFor" env:"BREAKER_OPEN_FOR"`
	BreakerProbes       uint32        `yaml:"breakerProbes" env:"BREAKER_PROBES"`

	RequestTimeout  time.Duration `yaml:"requestTimeout" env:"REQUEST_TIMEOUT"`
	ReadTimeout     time.Duration `yaml:"readTimeout" env:"READ_TIMEOUT"`
	WriteTimeout    time.Duration `yaml:"writeTimeout" env:"WRITE_TIMEOUT"`
	IdleTimeout     time.Duration `yaml:"idleTimeout" env:"IDLE_TIMEOUT"`
	BodyLimit       int           `yaml:"bodyLimit" env:"BODY_LIMIT"`
	HeaderLimit     int           `yaml:"headerLimit" env:"HEADER_LIMIT"`
	HashConcurrency int           `yaml:"hashConcurrency" env:"HASH_CONCURRENCY"`
	HashWait        time.Duration `yaml:"hashWait" env:"HASH_WAIT"`
	ShutdownDelay   time.Duration `yaml:"shutdownDelay" env:"SHUTDOWN_DELAY"`
	ShutdownTimeout time.Duration `yaml:"shutdownTimeout" env:"SHUTDOWN_TIMEOUT"`

	HTTPMaxAge              time.Duration `yaml:"httpMaxAge" env:"HTTP_MAX_AGE"`
	CDNMode                 bool          `yaml:"cdnMode" env:"CDN_MODE"`
	CDNSMaxAge              time.Duration `yaml:"cdnSMaxAge" env:"CDN_S_MAXAGE"`
	CDNStaleWhileRevalidate time.Duration `yaml:"cdnStaleWhileRevalidate" env:"CDN_STALE_WHILE_REVALIDATE"`
	CDNStaleIfError         time.Duration `yaml:"cdnStaleIfError" env:"CDN_STALE_IF_ERROR"`
	CDNPurgeURL             dsn           `yaml:"cdnPurgeURL" env:"CDN_PURGE_URL"`
	CDNPurgeHeader          secret        `yaml:"cdnPurgeHeader" env:"CDN_PURGE_HEADER"`
	CDNPurgeTimeout         time.Duration `yaml:"cdnPurgeTimeout" env:"CDN_PURGE_TIMEOUT"`

	LoginAccountFailures int           `yaml:"loginAccountFailures" env:"LOGIN_ACCOUNT_FAILURES"`
	LoginIPAttempts      int           `yaml:"loginIPAttempts" env:"LOGIN_IP_ATTEMPTS"`
	LoginKeyAttempts     int           `yaml:"loginKeyAttempts" env:"LOGIN_KEY_ATTEMPTS"`
	LoginUnknownKeys     int           `yaml:"loginUnknownKeyAttempts" env:"LOGIN_UNKNOWN_KEY_ATTEMPTS"`
	LoginIPv6Prefix      int           `yaml:"loginIPv6Prefix" env:"LOGIN_IPV6_PREFIX"`
	LoginLimitPeriod     time.Duration `yaml:"loginLimitPeriod" env:"LOGIN_LIMIT_PERIOD"`
	TrustedProxies       []string      `yaml:"trustedProxies" env:"TRUSTED_PROXIES"`

	LogLevel string `yaml:"logLevel" env:"LOG_LEVEL"`
}

// defaults are the values used when neither the file nor the environment
// sets one; configs/gateway.yaml repeats them for reference.
func defaults() config {
	return config{
		Addr:                    ":8080",
		AdminAddr:               "127.0.0.1:9090",
		DataDir:                 "data",
		StoreURL:                "sqlite:data/gateway.db",
		JWTIssuer:               "realty-gateway",
		JWTAudience:             "realty-api",
		TokenTTL:                time.Hour,
		JWTLeeway:               30 * time.Second,
		CacheTTL:                5 * time.Minute,
		CacheStale:              time.Hour,
		NegativeTTL:             30 * time.Second,
		LocalCacheSize:          100_000,
		StoreTimeout:            2 * time.Second,
		RedisTimeout:            100 * time.Millisecond,
		StoreConcurrency:        32,
		PostgresMaxConns:        16,
		BreakerWindow:           30 * time.Second,
		BreakerBucket:           time.Second,
		BreakerMinRequests:      20,
		BreakerFailureRatio:     0.5,
		BreakerOpenFor:          5 * time.Second,
		BreakerProbes:           3,
		RequestTimeout:          5 * time.Second,
		ReadTimeout:             5 * time.Second,
		WriteTimeout:            10 * time.Second,
		IdleTimeout:             60 * time.Second,
		BodyLimit:               64 << 10,
		HeaderLimit:             8 << 10,
		HashConcurrency:         4,
		HashWait:                250 * time.Millisecond,
		ShutdownDelay:           0,
		ShutdownTimeout:         15 * time.Second,
		HTTPMaxAge:              0,
		CDNMode:                 false,
		CDNSMaxAge:              time.Minute,
		CDNStaleWhileRevalidate: 30 * time.Second,
		CDNStaleIfError:         time.Hour,
		CDNPurgeTimeout:         2 * time.Second,
		LoginAccountFailures:    20,
		LoginIPAttempts:         300,
		LoginKeyAttempts:        1000,
		LoginUnknownKeys:        1000,
		LoginIPv6Prefix:         64,
		LoginLimitPeriod:        15 * time.Minute,
		LogLevel:                "info",
	}
}

// loadConfig reads the file, then the environment, then checks the result.
func loadConfig(environ map[string]string) (config, error) {
	cfg := defaults()
	path := environ["GATEWAY_CONFIG"]
	if path == "" {
		path = defaultConfigFile
	}
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
			return cfg, fmt.Errorf("config %s: %w", path, err)
		}
	case errors.Is(err, os.ErrNotExist) && environ["GATEWAY_CONFIG"] == "":
		// The embedded defaults stand.
	default:
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	if err := env.ParseWithOptions(&cfg, env.Options{Prefix: "GATEWAY_", Environment: environ}); err != nil {
		return cfg, fmt.Errorf("config environment: %w", err)
	}
	return cfg, cfg.validate()
}

func (c config) validate() error {
	var errs []error
	positive := map[string]time.Duration{
		"tokenTTL": c.TokenTTL, "cacheTTL": c.CacheTTL, "storeTimeout": c.StoreTimeout,
		"redisTimeout": c.RedisTimeout, "requestTimeout": c.RequestTimeout, "readTimeout": c.ReadTimeout,
		"writeTimeout": c.WriteTimeout, "idleTimeout": c.IdleTimeout, "breakerOpenFor": c.BreakerOpenFor,
		"breakerWindow": c.BreakerWindow, "breakerBucket": c.BreakerBucket, "hashWait": c.HashWait,
		"shutdownTimeout": c.ShutdownTimeout, "cdnPurgeTimeout": c.CDNPurgeTimeout,
		"loginLimitPeriod": c.LoginLimitPeriod,
	}
	for _, name := range slices.Sorted(maps.Keys(positive)) {
		if positive[name] <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive", name))
		}
	}
	nonNegative := map[string]time.Duration{
		"cacheStale": c.CacheStale, "negativeTTL": c.NegativeTTL, "jwtLeeway": c.JWTLeeway,
		"shutdownDelay": c.ShutdownDelay, "httpMaxAge": c.HTTPMaxAge, "cdnSMaxAge": c.CDNSMaxAge,
		"cdnStaleWhileRevalidate": c.CDNStaleWhileRevalidate, "cdnStaleIfError": c.CDNStaleIfError,
	}
	for _, name := range slices.Sorted(maps.Keys(nonNegative)) {
		if nonNegative[name] < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative", name))
		}
	}
	counts := map[string]int{
		"localCacheSize": c.LocalCacheSize, "storeConcurrency": c.StoreConcurrency, "postgresMaxConns": int(c.PostgresMaxConns),
		"bodyLimit": c.BodyLimit, "headerLimit": c.HeaderLimit, "hashConcurrency": c.HashConcurrency,
		"loginAccountFailures": c.LoginAccountFailures, "loginIPAttempts": c.LoginIPAttempts,
		"loginKeyAttempts": c.LoginKeyAttempts, "loginUnknownKeyAttempts": c.LoginUnknownKeys,
	}
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		if counts[name] <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive", name))
		}
	}
	if c.JWTIssuer == "" || c.JWTAudience == "" {
		errs = append(errs, errors.New("jwtIssuer and jwtAudience must be set"))
	}
	if c.LoginIPv6Prefix < 1 || c.LoginIPv6Prefix > 128 {
		errs = append(errs, errors.New("loginIPv6Prefix must be in 1…128"))
	}
	if c.BreakerFailureRatio <= 0 || c.BreakerFailureRatio > 1 {
		errs = append(errs, errors.New("breakerFailureRatio must be in (0, 1]"))
	}
	if _, err := c.trustedProxies(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// trustedProxies parses the proxies allowed to set X-Forwarded-For: CIDRs
// or single addresses.
func (c config) trustedProxies() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range c.TrustedProxies {
		s = strings.TrimSpace(s)
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("trustedProxies: %q is neither an address nor a CIDR", s)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// minSecretBytes is the shortest accepted HS256 key.
const minSecretBytes = 32

// signingKeys returns the token keys: GATEWAY_JWT_KEYS when set, else the
// secret with kid "default", else one generated once and kept in the data
// directory.
func (c config) signingKeys(log *slog.Logger) ([]gateway.SigningKey, error) {
	if c.JWTKeys != "" {
		var keys []gateway.SigningKey
		seen := map[string]bool{}
		for i, part := range strings.Split(string(c.JWTKeys), ",") {
			kid, sec, ok := strings.Cut(strings.TrimSpace(part), ":")
			if !ok || kid == "" || seen[kid] {
				return nil, fmt.Errorf("jwtKeys entry %d: want a unique kid:secret", i+1)
			}
			if len(sec) < minSecretBytes {
				return nil, fmt.Errorf("jwtKeys entry %d (kid %s): secret shorter than %d bytes", i+1, kid, minSecretBytes)
			}
			seen[kid] = true
			keys = append(keys, gateway.SigningKey{ID: kid, Secret: []byte(sec)})
		}
		return keys, nil
	}
	sec := string(c.JWTSecret)
	if sec == "" {
		var err error
		if sec, err = c.generatedSecret(); err != nil {
			return nil, err
		}
		log.Warn("no JWT secret configured; using the one generated in the data directory", "dir", c.DataDir)
	}
	if len(sec) < minSecretBytes {
		return nil, fmt.Errorf("jwtSecret shorter than %d bytes", minSecretBytes)
	}
	return []gateway.SigningKey{{ID: "default", Secret: []byte(sec)}}, nil
}

func (c config) generatedSecret() (string, error) {
	path := filepath.Join(c.DataDir, "jwt-secret")
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return "", fmt.Errorf("data directory: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("jwt secret: %w", err)
	}
	sec := hex.EncodeToString(raw)
	// Write it whole under a temporary name, then link it into place, so
	// that no process ever reads a half-written or empty secret.
	tmp, err := os.CreateTemp(c.DataDir, "jwt-secret-*")
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
