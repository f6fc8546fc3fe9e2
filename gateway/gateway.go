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
	"errors"
	"log/slog"
	"time"

	"github.com/gofiber/fiber/v2"
	"golang.org/x/sync/semaphore"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/upstream"
)

// Listings serves listings by key, from cache or store.
type Listings interface {
	Get(ctx context.Context, k cache.Key) (cache.Entry, error)
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
}

// Server holds the gateway's dependencies.
type Server struct {
	cfg               Config
	listings          Listings
	accounts          Accounts
	log               *slog.Logger
	hashing           *semaphore.Weighted
	dummyHash         string
	retryAfterSeconds int
}

// New builds a Server. It hashes one random password for the dummy
// verification of unknown accounts.
func New(cfg Config, listings Listings, accounts Accounts, log *slog.Logger) (*Server, error) {
	if len(cfg.Keys) == 0 {
		return nil, errors.New("gateway: no signing key")
	}
	dummyKey, err := NewAPIKey()
	if err != nil {
		return nil, err
	}
	dummy, err := HashPassword(dummyKey)
	if err != nil {
		return nil, err
	}
	return &Server{
		cfg:               cfg,
		listings:          listings,
		accounts:          accounts,
		log:               log,
		hashing:           newHashing(cfg.HashConcurrency),
		dummyHash:         dummy,
		retryAfterSeconds: max(1, int((cfg.RetryAfter+time.Second-1)/time.Second)),
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
	app.Post("/auth/login", s.login)
	app.Get("/realty/:ref", s.requireToken(), s.view)
	return app
}

// deadline gives every request a context that ends with RequestTimeout.
func (s *Server) deadline(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
	defer cancel()
	c.SetUserContext(ctx)
	return c.Next()
}
