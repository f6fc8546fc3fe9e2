package gateway

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/realty-gateway/gateway/internal/settings"
	"github.com/realty-gateway/gateway/ratelimit"
	"github.com/realty-gateway/gateway/signing"
)

// Config is the gateway's part of the configuration: the HTTP front door,
// tokens, logins and the caching headers.
type Config struct {
	RequestTimeout time.Duration `yaml:"requestTimeout" env:"REQUEST_TIMEOUT" help:"deadline of one request"`
	ReadTimeout    time.Duration `yaml:"readTimeout" env:"READ_TIMEOUT" help:"connection read timeout"`
	WriteTimeout   time.Duration `yaml:"writeTimeout" env:"WRITE_TIMEOUT" help:"connection write timeout"`
	IdleTimeout    time.Duration `yaml:"idleTimeout" env:"IDLE_TIMEOUT" help:"keep-alive connection idle timeout"`
	BodyLimit      int           `yaml:"bodyLimit" env:"BODY_LIMIT" help:"request body limit in bytes; larger is 413"`
	HeaderLimit    int           `yaml:"headerLimit" env:"HEADER_LIMIT" help:"request line and headers limit in bytes; larger is 431"`
	// MaxAge is how long browsers may reuse a listing without asking; 0
	// means they revalidate each time with the ETag.
	MaxAge time.Duration `yaml:"maxAge" env:"HTTP_MAX_AGE" help:"browser max-age of listings; 0 = \"private, no-cache\" (revalidate by ETag)"`
	// TrustedProxies may set X-Forwarded-For; others' is ignored.
	TrustedProxies []string `yaml:"trustedProxies" env:"TRUSTED_PROXIES" help:"CIDRs or addresses whose X-Forwarded-For is believed, comma-separated"`
	// AccessLog says which requests get an access-log line.
	AccessLog string `yaml:"accessLog" env:"ACCESS_LOG" help:"access log: all, errors (status 400 and up) or off"`
	// RequirePrecondition makes writes conditional (RFC 6585 §3).
	RequirePrecondition bool `yaml:"requirePrecondition" env:"REQUIRE_PRECONDITION" help:"PUT and DELETE without If-Match or If-Unmodified-Since answer 428"`

	JWT   JWT   `yaml:"jwt"`
	Login Login `yaml:"login"`
	CDN   CDN   `yaml:"cdn" envPrefix:"CDN_"`
}

// JWT configures token issuance and checks.
type JWT struct {
	Algorithm  string          `yaml:"algorithm" env:"JWT_ALGORITHM" help:"signs new tokens: EdDSA, ES256 or HS256; empty = HS256 where a secret or keys are configured, else ES256"`
	KeyFiles   string          `yaml:"keyFiles" env:"JWT_KEY_FILES" help:"private EdDSA/ES256 keys as kid:alg:path,... (PEM, mode 0600); empty = every <kid>.pem of <dataDir>/signing-keys, one generated on first start"`
	KeysPoll   time.Duration   `yaml:"keysPoll" env:"JWT_KEYS_POLL" help:"how often the fleet's key set is read from the store"`
	JWKSMaxAge time.Duration   `yaml:"jwksMaxAge" env:"JWKS_MAX_AGE" help:"max-age of /.well-known/jwks.json; a new key is published at least this long before it signs"`
	Secret     settings.Secret `yaml:"secret" env:"JWT_SECRET" help:"HS256 key of at least 32 bytes, kid \"default\"; verifies, and signs under HS256"`
	Keys       settings.Secret `yaml:"keys" env:"JWT_KEYS" help:"HS256 rotation: kid:secret,kid:secret; the first signs under HS256, all verify; replaces the secret"`
	Issuer     string          `yaml:"issuer" env:"JWT_ISSUER" help:"iss, issued and required"`
	Audience   string          `yaml:"audience" env:"JWT_AUDIENCE" help:"aud, issued and required"`
	TokenTTL   time.Duration   `yaml:"tokenTTL" env:"TOKEN_TTL" help:"token lifetime"`
	Leeway     time.Duration   `yaml:"leeway" env:"JWT_LEEWAY" help:"clock skew allowed on exp and nbf"`
}

// Login bounds logins: password hashing and the login limits.
type Login struct {
	HashConcurrency    int           `yaml:"hashConcurrency" env:"HASH_CONCURRENCY" help:"argon2id runs at once"`
	HashWait           time.Duration `yaml:"hashWait" env:"HASH_WAIT" help:"wait for a hashing slot, then 503"`
	AccountFailures    int           `yaml:"accountFailures" env:"LOGIN_ACCOUNT_FAILURES" help:"failed logins per account (e-mail within the key's firm) per period"`
	IPAttempts         int           `yaml:"ipAttempts" env:"LOGIN_IP_ATTEMPTS" help:"login attempts per client address per period (offices share one)"`
	KeyAttempts        int           `yaml:"keyAttempts" env:"LOGIN_KEY_ATTEMPTS" help:"login attempts per API key per period"`
	UnknownKeyAttempts int           `yaml:"unknownKeyAttempts" env:"LOGIN_UNKNOWN_KEY_ATTEMPTS" help:"lookups of API keys not seen to resolve lately, all clients together, per period"`
	IPv6Prefix         int           `yaml:"ipv6Prefix" env:"LOGIN_IPV6_PREFIX" help:"IPv6 clients count per network of this many bits"`
	LimitPeriod        time.Duration `yaml:"limitPeriod" env:"LOGIN_LIMIT_PERIOD" help:"the period of the login limits"`
}

// CDN configures responses for a CDN in front of the gateway.
type CDN struct {
	// PublicActive is CDN mode, set by the key http.cdn.mode
	// (GATEWAY_CDN_MODE) as true or false: active listings are public for
	// shared caches.
	PublicActive         bool          `yaml:"mode" env:"MODE" help:"active listings public for a CDN in front"`
	SMaxAge              time.Duration `yaml:"sMaxAge" env:"S_MAXAGE" help:"s-maxage of public listings"`
	StaleWhileRevalidate time.Duration `yaml:"staleWhileRevalidate" env:"STALE_WHILE_REVALIDATE" help:"stale-while-revalidate of public listings"`
	StaleIfError         time.Duration `yaml:"staleIfError" env:"STALE_IF_ERROR" help:"stale-if-error of public listings"`
	// OriginSecret lets the CDN read active listings without a user's
	// token, for revalidation and pre-warming: sent in OriginHeader.
	OriginSecret settings.Secret `yaml:"originSecret" env:"ORIGIN_SECRET" help:"secret the CDN sends in the origin header to read active listings without a token (secret); empty = off"`
	OriginHeader string          `yaml:"originHeader" env:"ORIGIN_HEADER" help:"header that carries the origin secret"`
	// ControlHeader carries the CDN's lifetime and stale rules, which
	// browsers must not see (RFC 9213); empty: chosen by the purge format.
	ControlHeader string `yaml:"controlHeader" env:"CONTROL_HEADER" help:"header with the CDN's s-maxage and stale rules: CDN-Cache-Control, Surrogate-Control or Cloudflare-CDN-Cache-Control; empty = by purge.format (Surrogate-Control for fastly, else CDN-Cache-Control)"`
}

// CDN control headers: RFC 9213's, Fastly's and Cloudflare's own.
const (
	CDNCacheControl           = "CDN-Cache-Control"
	SurrogateControl          = "Surrogate-Control"
	CloudflareCDNCacheControl = "Cloudflare-CDN-Cache-Control"
)

// DefaultConfig is the gateway's part of the built-in defaults.
func DefaultConfig() Config {
	return Config{
		RequestTimeout: 5 * time.Second,
		ReadTimeout:    5 * time.Second,
		WriteTimeout:   10 * time.Second,
		IdleTimeout:    60 * time.Second,
		BodyLimit:      64 << 10,
		HeaderLimit:    8 << 10,
		TrustedProxies: []string{},
		AccessLog:      "all",
		JWT: JWT{Issuer: "realty-gateway", Audience: "realty-api", TokenTTL: time.Hour, Leeway: 30 * time.Second,
			KeysPoll: 5 * time.Second, JWKSMaxAge: 5 * time.Minute},
		Login: Login{
			HashConcurrency: 4, HashWait: 250 * time.Millisecond,
			AccountFailures: 20, IPAttempts: 300, KeyAttempts: 1000, UnknownKeyAttempts: 1000,
			IPv6Prefix: 64, LimitPeriod: 15 * time.Minute,
		},
		CDN: CDN{SMaxAge: time.Minute, StaleWhileRevalidate: 30 * time.Second, StaleIfError: time.Hour, OriginHeader: "X-Origin-Auth"},
	}
}

// Validate reports every setting out of its range. The signing keys are
// checked by New: the caller may generate a missing secret first.
func (c Config) Validate() error {
	var errs []error
	positive := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive", name))
		}
	}
	notNegative := func(name string, d time.Duration) {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative", name))
		}
	}
	count := func(name string, n int) {
		if n <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive", name))
		}
	}
	positive("http.requestTimeout", c.RequestTimeout)
	positive("http.readTimeout", c.ReadTimeout)
	positive("http.writeTimeout", c.WriteTimeout)
	positive("http.idleTimeout", c.IdleTimeout)
	count("http.bodyLimit", c.BodyLimit)
	count("http.headerLimit", c.HeaderLimit)
	notNegative("http.maxAge", c.MaxAge)
	positive("http.jwt.tokenTTL", c.JWT.TokenTTL)
	notNegative("http.jwt.jwksMaxAge", c.JWT.JWKSMaxAge)
	notNegative("http.jwt.leeway", c.JWT.Leeway)
	if c.JWT.Issuer == "" || c.JWT.Audience == "" {
		errs = append(errs, errors.New("http.jwt.issuer and http.jwt.audience must be set"))
	}
	count("http.login.hashConcurrency", c.Login.HashConcurrency)
	positive("http.login.hashWait", c.Login.HashWait)
	count("http.login.accountFailures", c.Login.AccountFailures)
	count("http.login.ipAttempts", c.Login.IPAttempts)
	count("http.login.keyAttempts", c.Login.KeyAttempts)
	count("http.login.unknownKeyAttempts", c.Login.UnknownKeyAttempts)
	positive("http.login.limitPeriod", c.Login.LimitPeriod)
	if c.Login.IPv6Prefix < 1 || c.Login.IPv6Prefix > 128 {
		errs = append(errs, errors.New("http.login.ipv6Prefix must be in 1…128"))
	}
	notNegative("http.cdn.sMaxAge", c.CDN.SMaxAge)
	notNegative("http.cdn.staleWhileRevalidate", c.CDN.StaleWhileRevalidate)
	notNegative("http.cdn.staleIfError", c.CDN.StaleIfError)
	if !slices.Contains([]string{"", CDNCacheControl, SurrogateControl, CloudflareCDNCacheControl}, c.CDN.ControlHeader) {
		errs = append(errs, fmt.Errorf("http.cdn.controlHeader %q: want %s, %s or %s", c.CDN.ControlHeader,
			CDNCacheControl, SurrogateControl, CloudflareCDNCacheControl))
	}
	if c.CDN.OriginSecret != "" && (len(c.CDN.OriginSecret) < 32 || c.CDN.OriginHeader == "") {
		errs = append(errs, errors.New("http.cdn.originSecret needs at least 32 bytes and an originHeader"))
	}
	if !slices.Contains([]string{"all", "errors", "off"}, c.AccessLog) {
		errs = append(errs, fmt.Errorf("http.accessLog %q: want all, errors or off", c.AccessLog))
	}
	if _, err := c.trustedProxies(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// MinSecretBytes is the shortest accepted HS256 key.
const MinSecretBytes = 32

// SigningKeys returns the HS256 keys: Keys when set, else Secret with kid
// "default"; none where neither is set and HS256 does not sign.
func (j JWT) SigningKeys() ([]SigningKey, error) {
	if j.Keys == "" && j.Secret == "" && j.Algorithm != signing.AlgHS256 {
		return nil, nil
	}
	if j.Keys == "" {
		if len(j.Secret) < MinSecretBytes {
			return nil, fmt.Errorf("http.jwt.secret shorter than %d bytes", MinSecretBytes)
		}
		return []SigningKey{{ID: "default", Secret: []byte(j.Secret)}}, nil
	}
	var keys []SigningKey
	seen := map[string]bool{}
	for i, part := range strings.Split(string(j.Keys), ",") {
		kid, sec, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok || kid == "" || seen[kid] {
			return nil, fmt.Errorf("http.jwt.keys entry %d: want a unique kid:secret", i+1)
		}
		if len(sec) < MinSecretBytes {
			return nil, fmt.Errorf("http.jwt.keys entry %d (kid %s): secret shorter than %d bytes", i+1, kid, MinSecretBytes)
		}
		seen[kid] = true
		keys = append(keys, SigningKey{ID: kid, Secret: []byte(sec)})
	}
	return keys, nil
}

// loginLimits are the login limits of Login, each named, so that their
// in-process counters stay apart.
type loginLimits struct {
	accountFailures, ip, key, unknownKeys ratelimit.Limit
}

func (l Login) limits() loginLimits {
	limit := func(name string, n int) ratelimit.Limit {
		return ratelimit.Limit{Name: name, Count: n, Period: l.LimitPeriod}
	}
	return loginLimits{
		accountFailures: limit("login-account", l.AccountFailures),
		ip:              limit("login-ip", l.IPAttempts),
		key:             limit("login-key", l.KeyAttempts),
		unknownKeys:     limit("login-unknown-keys", l.UnknownKeyAttempts),
	}
}
