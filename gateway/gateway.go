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
	"hash/maphash"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/hashicorp/golang-lru/v2/expirable"
	"github.com/maypok86/otter/v2"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/semaphore"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/coding"
	"github.com/realty-gateway/gateway/ratelimit"
	"github.com/realty-gateway/gateway/upstream"
)

// Listings reads listings from cache or store, and writes them through to
// the store and both cache keys.
type Listings interface {
	// Get returns the listing under k, the fill of a miss carrying the
	// body in coding c. A hit from the process's memory does no I/O, is
	// judged at time at, and uses ctx only for its span, so ctx may be
	// made on first use.
	Get(ctx context.Context, k cache.Key, c coding.Coding, at time.Time) (cache.Entry, error)
	// Variant returns an entry's body in a coding, compressed once per
	// version.
	Variant(e cache.Entry, c coding.Coding) ([]byte, error)
	Resolve(ctx context.Context, k cache.Key) (upstream.Listing, error)
	Create(ctx context.Context, l upstream.Listing) (cache.Written, error)
	Replace(ctx context.Context, current, next upstream.Listing, cond upstream.Precondition) (cache.Written, error)
	Delete(ctx context.Context, current upstream.Listing, cond upstream.Precondition) (cache.Written, error)
	// Settle tells the store's change feed that the writes reached every
	// tier, every gateway and the CDN, so it need not repeat them.
	Settle(ws ...cache.Written)
}

// RateLimiter counts events per key against a limit and returns how long
// to wait, zero when allowed. Take counts one event; Reserve counts one
// before its outcome is known and returns a refund for an event that
// turns out not to count.
type RateLimiter interface {
	Take(ctx context.Context, key string, lim ratelimit.Limit) time.Duration
	Reserve(ctx context.Context, key string, lim ratelimit.Limit) (time.Duration, func(context.Context))
}

// Purger asks a CDN to drop what it holds under surrogate keys; hard:
// not even a stale copy may be served. It returns once the purge is
// queued, or, with synchronous purges, delivered or timed out; done is
// then told once whether it was delivered or given up.
type Purger interface {
	PurgeThen(ctx context.Context, hard bool, done func(delivered bool), keys ...string)
}

// Observer is told what the gateway answered, for metrics. Its methods
// must be cheap and must not block: Request runs on every request.
type Observer interface {
	// Request counts one answer; route is the route template.
	Request(route, method string, code int, d time.Duration)
	// Login counts a login by outcome: ok, bad_credentials, limited,
	// unavailable, bad_request.
	Login(outcome string)
	// RateLimited counts a login refused by a limit: ip, key, account,
	// unknown_keys.
	RateLimited(limit string)
	// AuthFailure counts a request refused for its token: missing,
	// malformed, invalid, expired, revoked.
	AuthFailure(reason string)
}

// NoObserver observes nothing.
type NoObserver struct{}

func (NoObserver) Request(string, string, int, time.Duration) {}
func (NoObserver) Login(string)                               {}
func (NoObserver) RateLimited(string)                         {}
func (NoObserver) AuthFailure(string)                         {}

// Revocations says whether a token is revoked: issued at issuedMs
// (milliseconds since 1970) to firmID's user userID, at or before a
// revocation of the user or of the whole firm. Generation names the
// revocations in force and grows with every change: a token found not
// revoked stays so while it stays the same. Both run on every request with
// a token, so they must be cheap and must not block.
type Revocations interface {
	Revoked(firmID, userID, issuedMs int64) bool
	Generation() uint64
}

// NoRevocations revokes nothing.
type NoRevocations struct{}

func (NoRevocations) Revoked(int64, int64, int64) bool { return false }
func (NoRevocations) Generation() uint64               { return 1 }

// Accounts finds firms and users for login.
type Accounts interface {
	FirmByKeyDigest(ctx context.Context, digest []byte) (upstream.Firm, error)
	UserByEmail(ctx context.Context, firmID int64, email string) (upstream.User, error)
}

// Deps are what a Server is built on: its collaborators, and the values
// it takes from other components' settings.
type Deps struct {
	Listings Listings
	Accounts Accounts
	Limiter  RateLimiter
	// Purger is nil when no CDN is purged: NoPurge.
	Purger Purger
	// Revoked is checked by every token the Server accepts.
	Revoked Revocations
	Log     *slog.Logger
	// Tracer records a span per request; nil: no spans, at no cost.
	Tracer trace.TracerProvider
	// RetryAfter is the Retry-After of a 503: the store breaker's open
	// time.
	RetryAfter time.Duration
	// CacheTTL is how long a cached listing is fresh, for the Age of a
	// stale one: the cache's fresh time.
	CacheTTL time.Duration
	// Observer is told every answer; nil: NoObserver.
	Observer Observer
	// Keys sign and verify tokens; nil: StaticKeys of the configured
	// HS256 secrets.
	Keys TokenKeys
}

// validate reports each dependency that is missing or out of range.
func (d Deps) validate() error {
	var errs []error
	for _, dep := range []struct {
		name    string
		missing bool
	}{
		{"listings", d.Listings == nil}, {"accounts", d.Accounts == nil}, {"limiter", d.Limiter == nil},
		{"revocations", d.Revoked == nil}, {"logger", d.Log == nil},
	} {
		if dep.missing {
			errs = append(errs, fmt.Errorf("no %s", dep.name))
		}
	}
	if d.RetryAfter <= 0 {
		errs = append(errs, errors.New("RetryAfter must be positive"))
	}
	if d.CacheTTL <= 0 {
		errs = append(errs, errors.New("CacheTTL must be positive"))
	}
	return errors.Join(errs...)
}

// Server is the HTTP front door: the routes' handlers and the token check.
// New builds it whole.
type Server struct {
	// Dependencies, as given to New.
	cfg      Config
	listings Listings
	// readContexts pools view's readContexts.
	readContexts sync.Pool
	accounts     Accounts
	purger       Purger
	limiter      RateLimiter
	revoked      Revocations
	log          *slog.Logger
	cacheTTL     time.Duration
	obs          Observer // nil: NoObserver
	// tracer and propagator record spans; nil: no spans.
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator

	tokenKeys TokenKeys

	// Derived from the settings once by New.
	limits  loginLimits
	proxies []netip.Prefix
	// pseudonymKey is the HMAC key of the login limiter's pseudonyms.
	pseudonymKey      []byte
	controls          cacheControls
	retryAfterSeconds int
	docs              publicDocuments
	jwksCacheControl  string
	// origin is the principal of a CDN that proved the origin secret: no
	// firm, so it reads active listings only.
	origin *verifiedToken
	// dummyHash is verified for unknown accounts, so they take as long.
	dummyHash       string
	requestIDPrefix string

	// State shared by requests.
	jwks      atomic.Pointer[publishedKeys]
	verified  *otter.Cache[uint64, *verifiedToken]
	tokenSeed maphash.Seed
	// knownKeys holds digests of API keys that resolved to a firm lately.
	knownKeys    *expirable.LRU[[sha256.Size]byte, struct{}]
	hashing      *semaphore.Weighted
	requestCount atomic.Uint64
	panics       atomic.Uint64
	dates        servedDates
}

// New validates cfg and deps and builds a Server on them. It hashes one
// random password for the dummy verification of unknown accounts.
func New(cfg Config, deps Deps) (*Server, error) {
	if err := errors.Join(cfg.Validate(), deps.validate()); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	keys, err := tokenKeys(cfg.JWT, deps.Keys)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	proxies, err := cfg.trustedProxies()
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	dummy, err := newDummyHash()
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	idPrefix, err := newRequestIDPrefix()
	if err != nil {
		return nil, fmt.Errorf("gateway: request id prefix: %w", err)
	}
	docs, err := newPublicDocuments()
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	purger := deps.Purger
	if purger == nil {
		purger = NoPurge{}
	}
	tracer, propagator := tracing(deps.Tracer)
	return &Server{
		cfg:               cfg,
		listings:          deps.Listings,
		accounts:          deps.Accounts,
		purger:            purger,
		limiter:           deps.Limiter,
		revoked:           deps.Revoked,
		log:               deps.Log,
		cacheTTL:          deps.CacheTTL,
		obs:               deps.Observer,
		tracer:            tracer,
		propagator:        propagator,
		tokenKeys:         keys,
		limits:            cfg.Login.limits(),
		proxies:           proxies,
		pseudonymKey:      pseudonymKey(keys.DeploymentSecret()),
		controls:          newCacheControls(cfg),
		retryAfterSeconds: seconds(deps.RetryAfter, 1),
		docs:              docs,
		jwksCacheControl:  fmt.Sprintf("public, max-age=%d", int(cfg.JWT.JWKSMaxAge/time.Second)),
		origin:            &verifiedToken{},
		dummyHash:         dummy,
		requestIDPrefix:   idPrefix,
		verified:          newVerifiedTokens(),
		tokenSeed:         maphash.MakeSeed(),
		knownKeys:         expirable.NewLRU[[sha256.Size]byte, struct{}](knownKeys, nil, cfg.Login.LimitPeriod),
		hashing:           newHashing(cfg.Login.HashConcurrency),
	}, nil
}

// newDummyHash hashes a random password, verified for unknown accounts so
// that they take as long as known ones.
func newDummyHash() (string, error) {
	key, err := NewAPIKey()
	if err != nil {
		return "", fmt.Errorf("dummy password: %w", err)
	}
	hash, err := HashPassword(key)
	if err != nil {
		return "", fmt.Errorf("dummy password hash: %w", err)
	}
	return hash, nil
}

// observer is the Observer, or one that observes nothing.
func (s *Server) observer() Observer {
	if s.obs == nil {
		return NoObserver{}
	}
	return s.obs
}

// App returns the Fiber app with every route.
func (s *Server) App() *fiber.App {
	app := s.newApp(false)
	app.Server().Handler = s.entry(app.Server().Handler)
	// Expect: 100-continue is answered by the same routes run up to the
	// body (expect.go).
	app.Server().ExpectHandler = s.expectContinue(s.entry(s.newApp(true).Handler()))
	return app
}

// newApp builds a Fiber app with every route; a preflight one runs each
// request only up to its body (see expectContinue).
func (s *Server) newApp(preflight bool) *fiber.App {
	errorHandler := s.errorHandler
	if preflight {
		errorHandler = s.preflightErrors
	}
	app := fiber.New(fiber.Config{
		AppName:               "realty-gateway",
		ErrorHandler:          errorHandler,
		StrictRouting:         true,
		CaseSensitive:         true,
		BodyLimit:             s.cfg.BodyLimit,
		ReadBufferSize:        s.cfg.HeaderLimit,
		WriteBufferSize:       writeBufferSize, // conn's held writes rely on it
		ReadTimeout:           s.cfg.ReadTimeout,
		WriteTimeout:          s.cfg.WriteTimeout,
		IdleTimeout:           s.cfg.IdleTimeout,
		DisableStartupMessage: true,
	})
	// A request the HTTP parser refused never reached routing: mark it,
	// so that the error handler does not name a path it never read.
	parserErrors := app.Server().ErrorHandler
	app.Server().ErrorHandler = func(fctx *fasthttp.RequestCtx, err error) {
		fctx.SetUserValue(unparsedRequest{}, true)
		parserErrors(fctx, err)
	}
	if preflight {
		app.Use(markPreflight)
	}
	app.Use(s.frame)
	if preflight {
		app.Use(s.preflightLength)
	}
	auth := s.requireToken()
	app.Post("/auth/login", s.login)
	app.Post("/realty", auth, s.create)
	app.Get("/realty/:ref", s.originOr(auth), s.view)
	app.Put("/realty/:ref", auth, s.replace)
	app.Delete("/realty/:ref", auth, s.remove)
	app.Get("/openapi.yaml", s.openAPI)
	app.Get(jwksPath, s.publishKeys)
	return app
}

// tokenKeys are the given keys, else StaticKeys of the configured secrets.
func tokenKeys(cfg JWT, given TokenKeys) (TokenKeys, error) {
	if given != nil {
		if given.Current() == nil {
			return nil, errors.New("token keys have no key set")
		}
		return given, nil
	}
	keys, err := cfg.SigningKeys()
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, errors.New("no token keys: give Keys, or configure an HS256 secret")
	}
	return NewStaticKeys(keys)
}

// pseudonymKey derives the limiter keys' secret from the deployment's
// secret (see TokenKeys), so that every gateway of a deployment derives
// the same one.
func pseudonymKey(secret []byte) []byte {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("login-limit-pseudonyms"))
	return mac.Sum(nil)
}

// seconds rounds d up to whole seconds, at least lowest.
func seconds(d time.Duration, lowest int) int {
	return max(lowest, int((d+time.Second-1)/time.Second))
}

// NoPurge is the Purger when no CDN is configured.
type NoPurge struct{}

// PurgeThen purges nothing: with no CDN in front, there is nothing to
// wait for.
func (NoPurge) PurgeThen(_ context.Context, _ bool, done func(bool), _ ...string) {
	if done != nil {
		done(true)
	}
}

// knownKeys bounds how many resolving API keys are remembered.
const knownKeys = 10_000
