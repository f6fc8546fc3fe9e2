package gateway

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/alexedwards/argon2id"
	"github.com/gofiber/fiber/v2"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/semaphore"

	"github.com/realty-gateway/gateway/upstream"
)

// maxPasswordBytes bounds the input to argon2id.
const maxPasswordBytes = 1024

// passwordParams are the OWASP argon2id parameters: m=19 MiB, t=2, p=1.
func passwordParams() *argon2id.Params {
	return &argon2id.Params{Memory: 19 * 1024, Iterations: 2, Parallelism: 1, SaltLength: 16, KeyLength: 32}
}

var errBusy = errors.New("password hashing at capacity")

// HashPassword returns the PHC-encoded argon2id hash of a password.
func HashPassword(password string) (string, error) {
	return argon2id.CreateHash(password, passwordParams())
}

// KeyDigest is how an API key is stored and looked up.
func KeyDigest(key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return sum[:]
}

// NewAPIKey returns a random 256-bit API key.
func NewAPIKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "rk_" + hex.EncodeToString(b), nil
}

// loginRequest is the body of POST /auth/login. An empty password is the
// same as none.
type loginRequest struct {
	Email    string `json:"email"`
	Password string `json:"password"`
	Key      string `json:"key"`
}

// decodeLogin parses and checks a login body. Unknown members are ignored.
func decodeLogin(body []byte) (loginRequest, error) {
	var req loginRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		return req, badRequest("The body must be a JSON object with string members email, key and optionally password.")
	}
	if err := dec.Decode(&json.RawMessage{}); !errors.Is(err, io.EOF) {
		return req, badRequest("The body must hold one JSON object.")
	}
	if strings.TrimSpace(req.Email) == "" || req.Key == "" {
		return req, badRequest("Members email and key are required.")
	}
	if len(req.Password) > maxPasswordBytes {
		return req, badRequest("The password is too long.")
	}
	return req, nil
}

// login answers POST /auth/login: a token for the e-mail, password (where
// the account has one) and firm API key, 401 with one body for every
// wrong part, 429 past a limit, 400 without a User-Agent.
func (s *Server) login(c *fiber.Ctx) (err error) {
	defer func() {
		if err != errContinue {
			s.observer().Login(loginOutcome(err))
		}
	}()
	if len(bytes.TrimSpace(c.Request().Header.UserAgent())) == 0 {
		return badRequest("A non-empty User-Agent header is required.")
	}
	body, err := jsonBody(c)
	if err != nil {
		return err
	}
	req, err := decodeLogin(body)
	if err != nil {
		return err
	}
	ctx := s.requestContext(c)
	if wait := s.limiter.Take(ctx, "login:ip:"+s.clientNetwork(c), s.limits.ip); wait > 0 {
		s.observer().RateLimited("ip")
		return tooManyLogins(wait)
	}
	user, err := s.authenticate(ctx, req)
	if err != nil {
		return err
	}
	tok, err := s.issueToken(user.FirmID, user.ID, requestTime(c))
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.JSON(fiber.Map{"jwtToken": tok})
}

// authenticate checks the key, the e-mail and the password. Within a known
// firm every failure costs one argon2id verification, so timing does not
// tell an unknown e-mail from a wrong password. Failed logins count against
// the account (the e-mail within the key's firm) only once the key is
// known, so that nobody without a firm's key can lock its users out; the
// attempt is counted before the password is checked and given back when it
// succeeds, so parallel guesses cannot all pass the limit before any of
// them is counted.
func (s *Server) authenticate(ctx context.Context, req loginRequest) (upstream.User, error) {
	digest := KeyDigest(req.Key)
	firm, err := s.firmByKey(ctx, digest)
	if err != nil {
		return upstream.User{}, err
	}
	if wait := s.limiter.Take(ctx, "login:key:"+s.pseudonym(digest), s.limits.key); wait > 0 {
		s.observer().RateLimited("key")
		return upstream.User{}, tooManyLogins(wait)
	}
	account := "login:account:" + s.pseudonym([]byte(strconv.FormatInt(firm.ID, 10)+"\x00"+upstream.NormalizeEmail(req.Email)))
	wait, refund := s.limiter.Reserve(ctx, account, s.limits.accountFailures)
	if wait > 0 {
		s.observer().RateLimited("account")
		return upstream.User{}, tooManyLogins(wait)
	}
	user, err := s.checkUser(ctx, firm, req)
	if !errors.Is(err, errBadCredentials) {
		// A success, or an attempt that was never judged (busy, store down).
		refund(context.WithoutCancel(ctx))
	}
	return user, err
}

// firmByKey resolves an API key. A key that resolves to no firm is refused
// at once, without a dummy hash: keys are 256 random bits, so there is
// nothing for timing to reveal, and hashing for junk keys would starve real
// logins of the hashing slots. Lookups of keys that have not resolved here
// lately draw on one budget shared by every client (Limits.UnknownKeys);
// past it they are refused without touching the store, while keys seen to
// resolve within the limit period go on.
func (s *Server) firmByKey(ctx context.Context, digest []byte) (upstream.Firm, error) {
	known := [sha256.Size]byte(digest)
	refund := noRefund
	if !s.knownKeys.Contains(known) {
		var wait time.Duration
		wait, refund = s.limiter.Reserve(ctx, "login:unknown-keys", s.limits.unknownKeys)
		if wait > 0 {
			s.observer().RateLimited("unknown_keys")
			return upstream.Firm{}, tooManyLogins(wait)
		}
	}
	firm, err := s.accounts.FirmByKeyDigest(ctx, digest)
	switch {
	case errors.Is(err, upstream.ErrNotFound):
		return upstream.Firm{}, errBadCredentials
	case err != nil:
		refund(context.WithoutCancel(ctx))
		return upstream.Firm{}, err
	}
	refund(context.WithoutCancel(ctx))
	s.knownKeys.Add(known, struct{}{})
	return firm, nil
}

func noRefund(context.Context) {}

// loginOutcome names a login's result for metrics.
func loginOutcome(err error) string {
	switch status, _ := statusOf(err); {
	case err == nil:
		return "ok"
	case status == fiber.StatusUnauthorized:
		return "bad_credentials"
	case status == fiber.StatusTooManyRequests:
		return "limited"
	case status >= fiber.StatusInternalServerError:
		return "unavailable"
	default:
		return "bad_request"
	}
}

// checkUser checks the e-mail and the password within the firm.
func (s *Server) checkUser(ctx context.Context, firm upstream.Firm, req loginRequest) (upstream.User, error) {
	user, err := s.accounts.UserByEmail(ctx, firm.ID, req.Email)
	if errors.Is(err, upstream.ErrNotFound) {
		return upstream.User{}, s.reject(ctx, req.Password)
	}
	if err != nil {
		return upstream.User{}, err
	}
	switch {
	case user.PasswordHash == "" && req.Password == "":
		return user, nil
	case user.PasswordHash == "" || req.Password == "":
		return upstream.User{}, s.reject(ctx, req.Password)
	}
	ok, err := s.verifyPassword(ctx, req.Password, user.PasswordHash)
	if err != nil {
		return upstream.User{}, err
	}
	if !ok {
		return upstream.User{}, errBadCredentials
	}
	return user, nil
}

// reject runs a dummy verification and returns errBadCredentials.
func (s *Server) reject(ctx context.Context, password string) error {
	if _, err := s.verifyPassword(ctx, password, s.dummyHash); err != nil {
		return err
	}
	return errBadCredentials
}

// verifyPassword runs argon2id under the hashing semaphore. When all slots
// stay busy for HashWait it gives up with errBusy.
func (s *Server) verifyPassword(ctx context.Context, password, hash string) (bool, error) {
	if s.tracer != nil {
		var span trace.Span
		ctx, span = s.tracer.Start(ctx, "password verify")
		defer span.End()
	}
	wait, cancel := context.WithTimeout(ctx, s.cfg.Login.HashWait)
	defer cancel()
	if err := s.hashing.Acquire(wait, 1); err != nil {
		return false, errBusy
	}
	defer s.hashing.Release(1)
	ok, err := argon2id.ComparePasswordAndHash(password, hash)
	if err != nil {
		s.log.ErrorContext(ctx, "stored password hash unreadable", "err", err)
		return false, errBadCredentials
	}
	return ok, nil
}

// pseudonym names a limiter key without the personal data in it: an HMAC
// under a secret of the gateway's, so that a dictionary of e-mails does
// not reverse it.
func (s *Server) pseudonym(b []byte) string {
	mac := hmac.New(sha256.New, s.pseudonymKey)
	mac.Write(b)
	return hex.EncodeToString(mac.Sum(nil)[:16])
}

func newHashing(n int) *semaphore.Weighted { return semaphore.NewWeighted(int64(max(n, 1))) }
