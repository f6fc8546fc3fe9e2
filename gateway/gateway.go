// Package gateway owns the HTTP front door: the Fiber app, its routes, login
// and token issuance, the token check, listing views with their caching
// headers, and the one error handler that turns every error into an RFC 9457
// problem+json answer.
//
// Concurrency: a *Server is built once and is safe for concurrent use by the
// Fiber app it returns.
package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/semaphore"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/ratelimit"
	"github.com/realty-gateway/gateway/upstream"
)

// Listings reads listings from cache or store, and writes them through to
// the store and both cache keys.
type Listings interface {
	Get(ctx context.Context, k cache.Key) (cache.Entry, error)
	Resolve(ctx context.Context, k cache.Key) (upstream.Listing, error)
	Create(ctx context.Context, l upstream.Listing) (upstream.Listing, cache.Entry, error)
	Replace(ctx context.Context, current, next upstream.Listing) (upstream.Listing, cache.Entry, error)
	Delete(ctx context.Context, current upstream.Listing) error
}

// RateLimiter counts events per key against a limit. Take counts one and
// Check only looks; both return how long to wait, zero when allowed.
type RateLimiter interface {
	Take(ctx context.Context, key string, lim ratelimit.Limit) time.Duration
	Check(ctx context.Context, key string, lim ratelimit.Limit) time.Duration
}

// LoginLimits bound login attempts.
type LoginLimits struct {
	// AccountFailures counts failed logins per e-mail.
	AccountFailures ratelimit.Limit
	// IP and Key count every attempt per client IP and per API key.
	IP  ratelimit.Limit
	Key ratelimit.Limit
}

// Purger asks a CDN to drop what it holds under surrogate keys. It must
// not block.
type Purger interface {
	Purge(keys ...string)
}

// CDN configures responses for a CDN in front of the gateway.
type CDN struct {
	// Enabled marks active listings public for shared caches.
	Enabled              bool
	SMaxAge              time.Duration
	StaleWhileRevalidate time.Duration
	StaleIfError         time.Duration
}

// Accounts finds firms and users for login.
type Accounts interface {
	FirmByKeyDigest(ctx context.Context, digest []byte) (upstream.Firm, error)
	UserByEmail(ctx context.Context, firmID int64, email string) (upstream.User, error)
}

// Config is the gateway's part of the configuration.
type Config struct {
	Issuer   string
	Audience string
	// Keys sign and verify tokens; the first one signs.
	Keys     []SigningKey
	TokenTTL time.Duration
	// Leeway is allowed on exp and nbf.
	Leeway time.Duration

	RequestTimeout time.Duration
	ReadTimeout    time.Duration
	WriteTimeout   time.Duration
	IdleTimeout    time.Duration
	BodyLimit      int
	// HeaderLimit bounds the request line and headers; larger is a 431.
	HeaderLimit int
	RetryAfter  time.Duration

	// HashConcurrency bounds concurrent argon2id runs; HashWait is how long
	// a login waits for a slot before a 503.
	HashConcurrency int
	HashWait        time.Duration

	// MaxAge is how long browsers may reuse a listing without asking; 0
	// means they revalidate each time with the ETag.
	MaxAge time.Duration
	CDN    CDN

	Limits LoginLimits
	// TrustedProxies may set X-Forwarded-For; others' is ignored.
	TrustedProxies []netip.Prefix
}

// Server holds the gateway's dependencies.
type Server struct {
	cfg          Config
	listings     Listings
	accounts     Accounts
	purger       Purger
	limiter      RateLimiter
	verified     *lru.Cache[[sha256.Size]byte, verifiedToken]
	pseudonymKey []byte
	// privateCacheControl and publicCacheControl are built once by New.
	privateCacheControl string
	publicCacheControl  string
	log                 *slog.Logger
	hashing             *semaphore.Weighted
	dummyHash           string
	retryAfterSeconds   int
}

// New builds a Server. It hashes one random password for the dummy
// verification of unknown accounts.
func New(cfg Config, listings Listings, accounts Accounts, limiter RateLimiter, purger Purger, log *slog.Logger) (*Server, error) {
	if len(cfg.Keys) == 0 {
		return nil, errors.New("gateway: no signing key")
	}
	dummyKey, err := NewAPIKey()
	if err != nil {
		return nil, fmt.Errorf("gateway: dummy password: %w", err)
	}
	dummy, err := HashPassword(dummyKey)
	if err != nil {
		return nil, fmt.Errorf("gateway: dummy password hash: %w", err)
	}
	private, public := cacheControls(cfg)
	return &Server{
		privateCacheControl: private,
		publicCacheControl:  public,
		cfg:                 cfg,
		listings:            listings,
		accounts:            accounts,
		purger:              purger,
		limiter:             limiter,
		verified:            newVerifiedTokens(),
		pseudonymKey:        pseudonymKey(cfg.Keys),
		log:                 log,
		hashing:             newHashing(cfg.HashConcurrency),
		dummyHash:           dummy,
		retryAfterSeconds:   seconds(cfg.RetryAfter, 1),
	}, nil
}

// App returns the Fiber app with every route.
func (s *Server) App() *fiber.App {
	app := fiber.New(fiber.Config{
		AppName:               "realty-gateway",
		ErrorHandler:          s.errorHandler,
		StrictRouting:         true,
		CaseSensitive:         true,
		BodyLimit:             s.cfg.BodyLimit,
		ReadBufferSize:        s.cfg.HeaderLimit,
		ReadTimeout:           s.cfg.ReadTimeout,
		WriteTimeout:          s.cfg.WriteTimeout,
		IdleTimeout:           s.cfg.IdleTimeout,
		DisableStartupMessage: true,
	})
	app.Use(s.deadline)
	auth := s.requireToken()
	app.Post("/auth/login", s.login)
	app.Post("/realty", auth, s.create)
	app.Get("/realty/:ref", auth, s.view)
	app.Put("/realty/:ref", auth, s.replace)
	app.Delete("/realty/:ref", auth, s.remove)
	return app
}

// deadline gives every request a context that ends with RequestTimeout.
func (s *Server) deadline(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
	defer cancel()
	c.SetUserContext(ctx)
	return c.Next()
}

// pseudonymKey derives the limiter keys' secret from the signing keys, so
// that every gateway of a deployment derives the same one. It takes the
// last key, the one that stays longest through a rotation.
func pseudonymKey(keys []SigningKey) []byte {
	mac := hmac.New(sha256.New, keys[len(keys)-1].Secret)
	mac.Write([]byte("login-limit-pseudonyms"))
	return mac.Sum(nil)
}

// seconds rounds d up to whole seconds, at least lowest.
func seconds(d time.Duration, lowest int) int {
	return max(lowest, int((d+time.Second-1)/time.Second))
}

// NoPurge is the Purger when no CDN is configured.
type NoPurge struct{}

// Purge does nothing.
func (NoPurge) Purge(...string) {}

// clientIP is the peer's address, or, when the peer is a trusted proxy,
// the right-most address in X-Forwarded-For that is not a trusted proxy:
// left of that, anyone may have written anything.
func (s *Server) clientIP(c *fiber.Ctx) string {
	addr, _ := netip.AddrFromSlice(c.Context().RemoteIP())
	addr = addr.Unmap()
	if !s.trusted(addr) {
		return addr.String()
	}
	hops := strings.Split(c.Get(fiber.HeaderXForwardedFor), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break
		}
		addr = hop.Unmap()
		if !s.trusted(addr) {
			break
		}
	}
	return addr.String()
}

func (s *Server) trusted(addr netip.Addr) bool {
	for _, p := range s.cfg.TrustedProxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}
