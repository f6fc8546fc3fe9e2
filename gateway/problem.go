package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/realty-gateway/gateway/upstream"
)

// problem is an error that is answered as it stands: its detail is written
// for the client.
type problem struct {
	status     int
	detail     string
	retryAfter time.Duration
	// header, when its name is set, goes out with the answer.
	header [2]string
}

func (p *problem) Error() string { return p.detail }

func badRequest(detail string) error { return &problem{status: fiber.StatusBadRequest, detail: detail} }

func tooManyLogins(wait time.Duration) error {
	return &problem{status: fiber.StatusTooManyRequests, detail: "Too many login attempts; try again later.", retryAfter: wait}
}

// errBadCredentials is the one answer to every failed login, so that the
// body does not tell which part was wrong.
var errBadCredentials = &problem{status: fiber.StatusUnauthorized, detail: "The e-mail, password or API key is not valid."}

// problemBody is an RFC 9457 problem detail.
type problemBody struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	// RequestID is the request's X-Request-ID.
	RequestID string `json:"requestId,omitempty"`
	// Errors names each bad member of a rejected listing body.
	Errors []upstream.FieldError `json:"errors,omitempty"`
}

// statusOf is the one table from errors to status codes, with the detail
// that may be shown to the client.
func statusOf(err error) (int, string) {
	var p *problem
	var fe *fiber.Error
	switch {
	case errors.As(err, &p):
		return p.status, p.detail
	case errors.Is(err, upstream.ErrInvalid):
		return fiber.StatusUnprocessableEntity, "The listing is not valid; see errors."
	case errors.Is(err, upstream.ErrConflict):
		return fiber.StatusConflict, "The listing number is already used by this firm."
	case errors.Is(err, upstream.ErrNotFound):
		return fiber.StatusNotFound, "No such listing."
	case errors.Is(err, upstream.ErrPreconditionFailed):
		return fiber.StatusPreconditionFailed, "The listing has changed since the version the preconditions name; nothing was written. Read it again."
	case errors.Is(err, upstream.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return fiber.StatusServiceUnavailable, "The listing store is unavailable; try again later."
	case errors.Is(err, errBusy):
		return fiber.StatusServiceUnavailable, "Too many logins in progress; try again later."
	case errors.As(err, &fe):
		// Fiber's own errors (404 route, 405, 413, 431): the status only,
		// never the message, which may echo the request.
		return fe.Code, ""
	default:
		return fiber.StatusInternalServerError, ""
	}
}

// statusTitle is a problem's title: the status's reason phrase as RFC
// 9110 §15 names it. net/http (and Fiber's utils.StatusMessage) still give
// the phrases of RFC 7231 and earlier for four of them.
func statusTitle(status int) string {
	switch status {
	case http.StatusRequestEntityTooLarge:
		return "Content Too Large"
	case http.StatusRequestURITooLong:
		return "URI Too Long"
	case http.StatusRequestedRangeNotSatisfiable:
		return "Range Not Satisfiable"
	case http.StatusUnprocessableEntity:
		return "Unprocessable Content"
	}
	return http.StatusText(status)
}

// unparsedRequest marks a request that the HTTP parser refused.
type unparsedRequest struct{}

// errorHandler is the app's one error handler. No internal error text
// reaches the client.
func (s *Server) errorHandler(c *fiber.Ctx, err error) error {
	status, detail := statusOf(err)
	var p *problem
	if errors.As(err, &p) && p.header[0] != "" {
		c.Set(p.header[0], p.header[1])
	}
	switch {
	case errors.As(err, &p) && p.retryAfter > 0:
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(seconds(p.retryAfter, 1)))
	case status == fiber.StatusUnauthorized && (p == nil || p.header[0] == ""):
		c.Set(fiber.HeaderWWWAuthenticate, bearerChallenge)
	case status == fiber.StatusServiceUnavailable:
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(s.retryAfterSeconds))
	}
	switch {
	case errors.Is(err, errPanicked):
		// frame logged it, with its stack.
	case status == fiber.StatusNotImplemented:
		// A method the client made up: no fault of the gateway's.
	case status == fiber.StatusServiceUnavailable:
		// An outage: its breaker transitions are logged once, not each 503.
		s.log.Debug("request failed", "requestId", requestID(c), "method", c.Method(), "path", c.Path(), "status", status, "err", err)
	case status >= fiber.StatusInternalServerError:
		s.log.Error("request failed", "requestId", requestID(c), "method", c.Method(), "path", c.Path(), "status", status, "err", err)
	}
	body := problemBody{
		Type:     "about:blank",
		Title:    statusTitle(status),
		Status:   status,
		Detail:   detail,
		Instance: c.Path(),
	}
	if c.Context().UserValue(unparsedRequest{}) != nil {
		// The request line or head did not parse (or was too large), so
		// there is no path to name; frame never ran, so name it here.
		body.Instance = ""
		if status == fiber.StatusBadRequest {
			body.Detail = "The request could not be parsed as HTTP/1.1."
		}
		var buf [48]byte
		c.Response().Header.SetBytesV(headerRequestID, s.newRequestID(buf[:0]))
	}
	body.RequestID = requestID(c)
	var invalid *upstream.ValidationError
	if errors.As(err, &invalid) {
		body.Errors = invalid.Fields
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Response().Header.Del(fiber.HeaderETag)
	if err := c.Status(status).JSON(body); err != nil {
		return err
	}
	if body.Title != fasthttp.StatusMessage(status) {
		// The status line says what the title does (fasthttp's phrases
		// are RFC 7231's for the four of statusTitle).
		c.Response().Header.SetStatusMessage([]byte(body.Title))
	}
	c.Set(fiber.HeaderContentType, "application/problem+json")
	if s.logsAccess(status) {
		s.accessLog(c, status, time.Since(requestTime(c)))
	}
	return nil
}
