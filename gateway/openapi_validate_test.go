package gateway

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	valerrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/responses"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"github.com/pb33f/libopenapi/orderedmap"
	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/cache"
	"github.com/realty-gateway/gateway/internal/testenv"
	"github.com/realty-gateway/gateway/ratelimit"
	"github.com/realty-gateway/gateway/upstream"
)

// specValidator is libopenapi-validator over the checked-in openapi.yaml,
// with the document's model for what the validator does not reach: the
// headers every answer carries, and answers to requests the document does
// not list (405, unrouted 404).
type specValidator struct {
	// strict makes every response header and body member that the
	// document does not declare an error. lenient is for the body of
	// GET /openapi.yaml, an OpenAPI document, whose members its schema
	// does not list one by one.
	strict, lenient validator.Validator
	model           *v3.Document
	// seen collects "METHOD /template STATUS" of every validated answer.
	mu   sync.Mutex
	seen map[string]bool
}

// newSpecValidator reads openapi.yaml and builds the validators. Format
// assertions check int64, double and uri-reference; the standard decoders
// let the YAML body of /openapi.yaml be checked against its schema, and no
// documented body goes unchecked for want of a decoder.
func newSpecValidator(t *testing.T) *specValidator {
	t.Helper()
	b, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	build := func(strict bool) (validator.Validator, *v3.Document) {
		doc, err := libopenapi.NewDocument(b)
		if err != nil {
			t.Fatalf("openapi.yaml: %v", err)
		}
		opts := []config.Option{config.WithFormatAssertions(), config.WithStandardBodyDecoders(), config.WithRejectUnsupportedBodyContent()}
		if strict {
			opts = append(opts, config.WithStrictMode())
		}
		v, errs := validator.NewValidator(doc, opts...)
		if len(errs) > 0 {
			t.Fatalf("openapi.yaml: %v", errs)
		}
		model, err := doc.BuildV3Model()
		if err != nil {
			t.Fatalf("openapi.yaml: %v", err)
		}
		return v, &model.Model
	}
	strict, model := build(true)
	lenient, _ := build(false)
	return &specValidator{strict: strict, lenient: lenient, model: model, seen: map[string]bool{}}
}

// validatorFor is the validator for requests to path: lenient for the
// document, whose headers it then checks strictly itself.
func (sv *specValidator) validatorFor(path string) validator.Validator {
	if path == "/openapi.yaml" {
		return sv.lenient
	}
	return sv.strict
}

// strictHeaders checks in strict mode that every header of an answer to
// path is documented for its operation and status.
func (sv *specValidator) strictHeaders(t *testing.T, req *http.Request, a answer) {
	t.Helper()
	template := templateOf(req.URL.Path)
	item := sv.model.Paths.PathItems.GetOrZero(template)
	if item == nil {
		return
	}
	op := item.GetOperations().GetOrZero(strings.ToLower(req.Method))
	if op == nil {
		return
	}
	documented := op.Responses.Codes.GetOrZero(strconv.Itoa(a.StatusCode))
	if documented == nil {
		return // the validator reports an undocumented status
	}
	headers := documented.Headers
	if headers == nil {
		headers = orderedmap.New[string, *v3.Header]()
	}
	if ok, errs := responses.ValidateResponseHeaders(req, a.Response, headers, template, strconv.Itoa(a.StatusCode),
		config.WithFormatAssertions(), config.WithStrictMode()); !ok {
		t.Errorf("%s %s → %d: headers do not match openapi.yaml:%s", req.Method, req.URL.Path, a.StatusCode, describe(errs))
	}
}

// describe lists validation errors one per line, with the members at
// fault.
func describe(errs []*valerrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "\n  - %s: %s", e.Message, e.Reason)
		if e.SpecLine > 0 {
			fmt.Fprintf(&b, " (openapi.yaml line %d)", e.SpecLine)
		}
		for _, f := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "\n      %s: %s", f.FieldPath, f.Reason)
		}
	}
	return b.String()
}

// templateOf is the document's path template of a request path.
func templateOf(path string) string {
	if strings.HasPrefix(path, "/realty/") {
		return "/realty/{ref}"
	}
	return path
}

// storeSwitch is the fixture's guarded store, which fails on demand as a
// dead database does: with down set every call is upstream.ErrUnavailable,
// which is what Guarded makes of any failure to answer.
type storeSwitch struct {
	*upstream.Guarded
	down atomic.Bool
}

func (s *storeSwitch) fail() error {
	if s.down.Load() {
		return fmt.Errorf("%w: store switched off by the test", upstream.ErrUnavailable)
	}
	return nil
}

func (s *storeSwitch) ListingByID(ctx context.Context, id int64) (upstream.Listing, error) {
	if err := s.fail(); err != nil {
		return upstream.Listing{}, err
	}
	return s.Guarded.ListingByID(ctx, id)
}

func (s *storeSwitch) ListingByNumber(ctx context.Context, firmID, no int64) (upstream.Listing, error) {
	if err := s.fail(); err != nil {
		return upstream.Listing{}, err
	}
	return s.Guarded.ListingByNumber(ctx, firmID, no)
}

func (s *storeSwitch) EncodedByID(ctx context.Context, id int64) (upstream.Encoded, error) {
	if err := s.fail(); err != nil {
		return upstream.Encoded{}, err
	}
	return s.Guarded.EncodedByID(ctx, id)
}

func (s *storeSwitch) EncodedByNumber(ctx context.Context, firmID, no int64) (upstream.Encoded, error) {
	if err := s.fail(); err != nil {
		return upstream.Encoded{}, err
	}
	return s.Guarded.EncodedByNumber(ctx, firmID, no)
}

func (s *storeSwitch) ImportListings(ctx context.Context, ls []upstream.Listing) ([]upstream.Listing, error) {
	if err := s.fail(); err != nil {
		return nil, err
	}
	return s.Guarded.ImportListings(ctx, ls)
}

func (s *storeSwitch) UpdateListing(ctx context.Context, l upstream.Listing, cond upstream.Precondition) (upstream.Listing, error) {
	if err := s.fail(); err != nil {
		return upstream.Listing{}, err
	}
	return s.Guarded.UpdateListing(ctx, l, cond)
}

func (s *storeSwitch) DeleteListing(ctx context.Context, firmID, id int64, cond upstream.Precondition) (upstream.Listing, error) {
	if err := s.fail(); err != nil {
		return upstream.Listing{}, err
	}
	return s.Guarded.DeleteListing(ctx, firmID, id, cond)
}

func (s *storeSwitch) FirmByKeyDigest(ctx context.Context, digest []byte) (upstream.Firm, error) {
	if err := s.fail(); err != nil {
		return upstream.Firm{}, err
	}
	return s.Guarded.FirmByKeyDigest(ctx, digest)
}

func (s *storeSwitch) UserByEmail(ctx context.Context, firmID int64, email string) (upstream.User, error) {
	if err := s.fail(); err != nil {
		return upstream.User{}, err
	}
	return s.Guarded.UserByEmail(ctx, firmID, email)
}

// liveGateway is the fixture's gateway (SQLite store, its firms, users and
// listings 1 and 2) serving HTTP on a 127.0.0.1 port, wired as serve.go
// wires it with Redis: the listing cache and the login limiter on a real
// Redis, under a key prefix of its own that is removed afterwards.
type liveGateway struct {
	addr   string
	store  *storeSwitch
	client *http.Client
}

func startLiveGateway(t *testing.T, change func(*Config), fresh time.Duration) *liveGateway {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisOrStandIn(t), ContextTimeoutEnabled: true})
	prefix := testenv.RandomName("gwtest") + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, "*"+prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		rdb.Close()
	})
	log := slog.New(slog.DiscardHandler)
	store := &storeSwitch{}
	limiter, err := ratelimit.New(rdb, prefix, time.Second, log)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureOf(t, fixtureOptions{
		change: change,
		accounts: func(a Accounts) Accounts {
			g, ok := a.(*upstream.Guarded)
			if !ok {
				t.Fatalf("the fixture's accounts are a %T, want *upstream.Guarded", a)
			}
			store.Guarded = g
			return store
		},
		listings: func(Listings) Listings {
			c, err := cache.NewRedis(rdb, time.Second, cache.Config{
				Fresh: fresh, Stale: time.Hour, Negative: time.Minute, LocalMaxAge: 2 * time.Second, InvalidationWait: 50 * time.Millisecond,
			}, cache.Deps{Source: store, Log: log, LoadTimeout: 2 * time.Second, Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
		limiter:  limiter,
		cacheTTL: fresh,
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go f.app.Listener(ln) //nolint:errcheck // ends with Shutdown
	t.Cleanup(func() { f.app.Shutdown() })
	// No transparent gzip: each exchange asks for the coding it names,
	// and sees the bytes as sent.
	transport := &http.Transport{DisableCompression: true}
	t.Cleanup(transport.CloseIdleConnections)
	return &liveGateway{addr: ln.Addr().String(), store: store, client: &http.Client{Transport: transport, Timeout: 10 * time.Second}}
}

// exchange is one request to the live gateway and the status it must get.
type exchange struct {
	method string
	path   string
	auth   string
	// header is set on top of User-Agent and, with a body, Content-Type
	// application/json; User-Agent "" sends none.
	header map[string]string
	body   string
	want   int
	// refused: the document refuses the request too (a missing token, a
	// malformed ref or body), so the validator must find the request
	// invalid; its answer must still be the one documented.
	refused bool
}

// answer is a response with its body read.
type answer struct {
	*http.Response
	body []byte
}

func (g *liveGateway) request(t *testing.T, ex exchange) *http.Request {
	t.Helper()
	var body io.Reader
	if ex.body != "" {
		body = strings.NewReader(ex.body)
	}
	req, err := http.NewRequest(ex.method, "http://"+g.addr+ex.path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("User-Agent", "openapi-validate-test")
	if ex.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if ex.auth != "" {
		req.Header.Set("Authorization", ex.auth)
	}
	for k, v := range ex.header {
		req.Header.Set(k, v)
	}
	return req
}

// send sends ex and checks its status.
func (g *liveGateway) send(t *testing.T, ex exchange) (*http.Request, answer) {
	t.Helper()
	req := g.request(t, ex)
	resp, err := g.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != ex.want {
		t.Fatalf("%s %s: status %d, want %d: %s", ex.method, ex.path, resp.StatusCode, ex.want, body)
	}
	return req, answer{Response: resp, body: body}
}

// do sends ex, checks its status, and validates the request and the answer
// against the document.
func (g *liveGateway) do(t *testing.T, sv *specValidator, ex exchange) answer {
	t.Helper()
	req, a := g.send(t, ex)
	sv.check(t, req, a, ex.refused)
	return a
}

// rewind gives req and a their bodies again for the next validation.
func rewind(t *testing.T, req *http.Request, a answer) {
	t.Helper()
	if req.GetBody != nil {
		b, err := req.GetBody()
		if err != nil {
			t.Fatal(err)
		}
		req.Body = b
	}
	a.Response.Body = io.NopCloser(bytes.NewReader(decoded(t, a)))
}

// decoded is a's body without its content coding: the document describes
// the representation's data, whatever its coding.
func decoded(t *testing.T, a answer) []byte {
	t.Helper()
	var r io.Reader
	switch ce := a.Header.Get("Content-Encoding"); ce {
	case "":
		return a.body
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(a.body))
		if err != nil {
			t.Fatalf("gzip body: %v", err)
		}
		r = zr
	case "br":
		r = brotli.NewReader(bytes.NewReader(a.body))
	case "zstd":
		zr, err := zstd.NewReader(bytes.NewReader(a.body))
		if err != nil {
			t.Fatalf("zstd body: %v", err)
		}
		defer zr.Close()
		r = zr
	default:
		t.Fatalf("Content-Encoding %q", ce)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s body: %v", a.Header.Get("Content-Encoding"), err)
	}
	return b
}

// check validates a documented exchange: the request (which must be
// invalid when refused) and the answer, with its status, every header and
// the body.
func (sv *specValidator) check(t *testing.T, req *http.Request, a answer, refused bool) {
	t.Helper()
	sv.common(t, req, a)
	rewind(t, req, a)
	v := sv.validatorFor(req.URL.Path)
	if v == sv.lenient {
		sv.strictHeaders(t, req, a)
	}
	if !refused {
		if ok, errs := v.ValidateHttpRequestResponse(req, a.Response); !ok {
			t.Errorf("%s %s → %d does not match openapi.yaml:%s\nbody: %s", req.Method, req.URL.Path, a.StatusCode, describe(errs), a.body)
		}
	} else {
		if ok, errs := v.ValidateHttpRequest(req); ok {
			t.Errorf("%s %s: the gateway refuses it with %d, but openapi.yaml accepts the request", req.Method, req.URL.Path, a.StatusCode)
		} else {
			t.Logf("openapi.yaml refuses the request too:%s", describe(errs))
		}
		rewind(t, req, a)
		if ok, errs := v.ValidateHttpResponse(req, a.Response); !ok {
			t.Errorf("%s %s → %d does not match openapi.yaml:%s\nbody: %s", req.Method, req.URL.Path, a.StatusCode, describe(errs), a.body)
		}
	}
	sv.saw(req.Method, req.URL.Path, a.StatusCode)
}

// saw records that an operation's documented status was validated.
func (sv *specValidator) saw(method, path string, status int) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	sv.seen[method+" "+templateOf(path)+" "+strconv.Itoa(status)] = true
}

// common checks what the document says of every answer but cannot attach
// to each: the X-Request-ID header (components/headers/XRequestID), and a
// problem body that repeats the status.
func (sv *specValidator) common(t *testing.T, req *http.Request, a answer) {
	t.Helper()
	for name, h := range sv.model.Components.Headers.FromOldest() {
		every := h.Extensions.GetOrZero("x-every-response")
		if every == nil {
			continue
		}
		required := *h
		required.Required = true
		headers := orderedmap.New[string, *v3.Header]()
		headers.Set(every.Value, &required)
		if ok, errs := responses.ValidateResponseHeaders(req, a.Response, headers, templateOf(req.URL.Path), strconv.Itoa(a.StatusCode),
			config.WithFormatAssertions()); !ok {
			t.Errorf("%s %s → %d: header %s (components/headers/%s):%s", req.Method, req.URL.Path, a.StatusCode, every.Value, name, describe(errs))
		}
	}
	if a.Header.Get("Content-Type") == "application/problem+json" {
		var p struct{ Status int }
		if err := json.Unmarshal(a.body, &p); err != nil || p.Status != a.StatusCode {
			t.Errorf("%s %s → %d: problem body %s does not repeat the status", req.Method, req.URL.Path, a.StatusCode, a.body)
		}
	}
}

// checkUndocumented validates the answer to a request the document lists
// no operation for, which the validator cannot route: a problem+json body
// of schema Problem, and for a 405 the headers of
// components/responses/MethodNotAllowed with Allow naming exactly the
// path's documented methods and HEAD with GET.
func (sv *specValidator) checkUndocumented(t *testing.T, req *http.Request, a answer) {
	t.Helper()
	sv.common(t, req, a)
	if ct := a.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	problem := sv.model.Components.Schemas.GetOrZero("Problem")
	if problem == nil {
		t.Fatal("no schema Problem")
	}
	if ok, errs := schema_validation.NewSchemaValidator(config.WithFormatAssertions()).ValidateSchemaBytes(problem.Schema(), a.body); !ok {
		t.Errorf("body %s is not a Problem:%s", a.body, describe(errs))
	}
	if a.StatusCode != http.StatusMethodNotAllowed {
		return
	}
	documented := sv.model.Components.Responses.GetOrZero("MethodNotAllowed")
	if documented == nil {
		t.Fatal("no response MethodNotAllowed")
	}
	if ok, errs := responses.ValidateResponseHeaders(req, a.Response, documented.Headers, req.URL.Path, "405",
		config.WithFormatAssertions(), config.WithStrictMode()); !ok {
		t.Errorf("headers of the 405 do not match components/responses/MethodNotAllowed:%s", describe(errs))
	}
	item := sv.model.Paths.PathItems.GetOrZero(templateOf(req.URL.Path))
	if item == nil {
		t.Fatalf("%s is not a documented path", req.URL.Path)
	}
	var want []string
	for method := range item.GetOperations().KeysFromOldest() {
		want = append(want, strings.ToUpper(method))
		if method == "get" {
			want = append(want, http.MethodHead)
		}
	}
	got := strings.Split(a.Header.Get("Allow"), ", ")
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) || slices.Contains(got, req.Method) {
		t.Errorf("Allow %q, want the documented methods %q", a.Header.Get("Allow"), want)
	}
}

// doUndocumented sends a request the document has no operation for.
func (g *liveGateway) doUndocumented(t *testing.T, sv *specValidator, ex exchange) {
	t.Helper()
	req, a := g.send(t, ex)
	sv.checkUndocumented(t, req, a)
}

// head sends HEAD for a GET exchange and checks that it is answered like
// the GET: same status, same representation headers, no body. The HEAD's
// headers are validated as those of the GET, with the GET's body.
func (g *liveGateway) head(t *testing.T, sv *specValidator, ex exchange) {
	t.Helper()
	got := g.do(t, sv, ex) // the GET, validated
	ex.method = http.MethodHead
	req := g.request(t, ex)
	resp, err := g.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != got.StatusCode || len(body) != 0 {
		t.Fatalf("HEAD %s: status %d with %d body bytes; GET: %d", ex.path, resp.StatusCode, len(body), got.StatusCode)
	}
	for _, h := range []string{"Content-Type", "Content-Length", "Content-Encoding", "ETag", "Cache-Control", "Vary", "X-Cache"} {
		if resp.Header.Get(h) != got.Header.Get(h) {
			t.Errorf("HEAD %s: %s %q, GET %q", ex.path, h, resp.Header.Get(h), got.Header.Get(h))
		}
	}
	if resp.ContentLength != int64(len(got.body)) {
		t.Errorf("HEAD %s: Content-Length %d, the GET's body has %d bytes", ex.path, resp.ContentLength, len(got.body))
	}
	ex.method = http.MethodGet
	asGet := g.request(t, ex)
	sv.check(t, asGet, answer{Response: resp, body: got.body}, ex.refused)
}

// raw sends a request head over its own connection and reads the answer:
// for what net/http will not send, or cannot read reliably.
func (g *liveGateway) raw(t *testing.T, head string) (answer, error) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", g.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, head); err != nil {
		return answer{}, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return answer{}, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return answer{Response: resp, body: body}, err
}

// listingBody returns a listing as GET answers it, to send back with PUT,
// with edit applied to its decoded members.
func listingBody(t *testing.T, a answer, edit func(map[string]any)) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestOpenAPIDocumentIsValid: openapi.yaml is a valid OpenAPI 3.1 document
// by the specification's own schema.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	sv := newSpecValidator(t)
	if ok, errs := sv.strict.ValidateDocument(); !ok {
		t.Fatalf("openapi.yaml is not a valid OpenAPI 3.1 document:%s", describe(errs))
	}
}

// TestOpenAPIValidatesLiveGateway sends real requests to running gateways,
// for every operation of openapi.yaml and every status it documents,
// success and error, and validates each request and answer against the
// document with libopenapi-validator: the status must be documented for
// the operation, every header present must be documented and match its
// schema, required ones must be present, and the body must match the
// media type's schema. A request the gateway refuses must be one the
// document refuses too, where it can say so. At the end, every documented
// status of every operation must have been seen.
func TestOpenAPIValidatesLiveGateway(t *testing.T) {
	sv := newSpecValidator(t)
	g := startLiveGateway(t, nil, time.Minute)
	owner, otp, other := bearer(t, 1, 1), bearer(t, 1, 2), bearer(t, 2, 3)

	t.Run("login", func(t *testing.T) {
		for _, tt := range []struct {
			name string
			ex   exchange
		}{
			{name: "password", ex: exchange{body: loginBody("pw@one.example", testPassword, testKey), want: 200}},
			{name: "passwordless", ex: exchange{body: `{"email":"otp@one.example","key":"` + testKey + `"}`, want: 200}},
			{name: "null password", ex: exchange{body: `{"email":"otp@one.example","password":null,"key":"` + testKey + `"}`, want: 200}},
			{name: "wrong password", ex: exchange{body: loginBody("pw@one.example", "wrong", testKey), want: 401}},
			{name: "unknown key", ex: exchange{body: loginBody("pw@one.example", testPassword, "rk_unknown"), want: 401}},
			{name: "password for a passwordless account", ex: exchange{body: loginBody("otp@one.example", "x", testKey), want: 401}},
			{name: "no User-Agent", ex: exchange{body: loginBody("pw@one.example", testPassword, testKey),
				header: map[string]string{"User-Agent": ""}, want: 400, refused: true}},
			{name: "blank User-Agent", ex: exchange{body: loginBody("pw@one.example", testPassword, testKey),
				header: map[string]string{"User-Agent": " \t "}, want: 400, refused: true}},
			{name: "not JSON", ex: exchange{body: `{"email":`, want: 400, refused: true}},
			{name: "no key", ex: exchange{body: `{"email":"pw@one.example","password":"x"}`, want: 400, refused: true}},
			{name: "blank email", ex: exchange{body: loginBody(" ", "x", testKey), want: 400, refused: true}},
			{name: "member of the wrong type", ex: exchange{body: `{"email":"pw@one.example","key":7}`, want: 400, refused: true}},
			{name: "password over 1 KiB", ex: exchange{body: loginBody("pw@one.example", strings.Repeat("p", 1025), testKey), want: 400, refused: true}},
			{name: "not a JSON content type", ex: exchange{body: loginBody("pw@one.example", testPassword, testKey),
				header: map[string]string{"Content-Type": "text/plain"}, want: 415, refused: true}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				tt.ex.method, tt.ex.path = http.MethodPost, "/auth/login"
				g.do(t, sv, tt.ex)
			})
		}
	})

	t.Run("view", func(t *testing.T) {
		miss := g.do(t, sv, exchange{method: "GET", path: "/realty/1", auth: owner, want: 200})
		hit := g.do(t, sv, exchange{method: "GET", path: "/realty/1", auth: owner, want: 200})
		if miss.Header.Get("X-Cache") != "MISS" || hit.Header.Get("X-Cache") != "HIT" {
			t.Errorf("X-Cache %q then %q, want MISS then HIT", miss.Header.Get("X-Cache"), hit.Header.Get("X-Cache"))
		}
		etag := hit.Header.Get("ETag")
		for _, tt := range []struct {
			name string
			ex   exchange
		}{
			{name: "by number, another firm's active listing", ex: exchange{path: "/realty/1-1", auth: other, want: 200}},
			{name: "own passive listing", ex: exchange{path: "/realty/2", auth: owner, want: 200}},
			{name: "If-None-Match", ex: exchange{path: "/realty/1", auth: owner, header: map[string]string{"If-None-Match": etag}, want: 304}},
			{name: "If-None-Match, weak, by number", ex: exchange{path: "/realty/1-1", auth: owner, header: map[string]string{"If-None-Match": `"x", W/` + etag}, want: 304}},
			{name: "If-Match the current tag", ex: exchange{path: "/realty/1", auth: owner, header: map[string]string{"If-Match": etag}, want: 200}},
			{name: "If-Modified-Since the Last-Modified", ex: exchange{path: "/realty/1", auth: owner, header: map[string]string{"If-Modified-Since": hit.Header.Get("Last-Modified")}, want: 304}},
			{name: "If-Unmodified-Since before the Last-Modified", ex: exchange{path: "/realty/1", auth: owner, header: map[string]string{"If-Unmodified-Since": "Sat, 01 Jan 2000 00:00:00 GMT"}, want: 412}},
			{name: "If-Match *", ex: exchange{path: "/realty/1", auth: owner, header: map[string]string{"If-Match": "*"}, want: 200}},
			{name: "If-Match another tag", ex: exchange{path: "/realty/1", auth: owner, header: map[string]string{"If-Match": `"zzz"`}, want: 412}},
			{name: "malformed If-Match", ex: exchange{path: "/realty/1", auth: owner, header: map[string]string{"If-Match": "zzz"}, want: 400, refused: true}},
			{name: "malformed If-None-Match", ex: exchange{path: "/realty/1", auth: owner, header: map[string]string{"If-None-Match": `"a" "b"`}, want: 400, refused: true}},
			{name: "If-Match * twice", ex: exchange{path: "/realty/1", auth: owner, header: map[string]string{"If-Match": "*, *"}, want: 400, refused: true}},
			{name: "no token", ex: exchange{path: "/realty/1", want: 401, refused: true}},
			{name: "not a bearer token", ex: exchange{path: "/realty/1", auth: "Basic dTpw", want: 401, refused: true}},
			{name: "garbage token", ex: exchange{path: "/realty/1", auth: "Bearer abc.def.ghi", want: 401}},
			{name: "malformed ref without a token", ex: exchange{path: "/realty/01", want: 401, refused: true}},
			{name: "no such id", ex: exchange{path: "/realty/999", auth: owner, want: 404}},
			{name: "no such number", ex: exchange{path: "/realty/1-999", auth: owner, want: 404}},
			{name: "another firm's passive listing", ex: exchange{path: "/realty/1-2", auth: other, want: 404}},
			{name: "leading zero", ex: exchange{path: "/realty/01", auth: owner, want: 400, refused: true}},
			{name: "zero", ex: exchange{path: "/realty/0", auth: owner, want: 400, refused: true}},
			{name: "zero number", ex: exchange{path: "/realty/1-0", auth: owner, want: 400, refused: true}},
			{name: "letters", ex: exchange{path: "/realty/abc", auth: owner, want: 400, refused: true}},
			{name: "three parts", ex: exchange{path: "/realty/1-2-3", auth: owner, want: 400, refused: true}},
			{name: "over int64", ex: exchange{path: "/realty/99999999999999999999", auth: owner, want: 400, refused: true}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				tt.ex.method = http.MethodGet
				g.do(t, sv, tt.ex)
			})
		}
		t.Run("HEAD", func(t *testing.T) {
			g.head(t, sv, exchange{path: "/realty/1", auth: owner, want: 200})
			g.head(t, sv, exchange{path: "/realty/999", auth: owner, want: 404})
			for _, ae := range []string{"gzip", "br", "zstd", "gzip, deflate, br, zstd"} {
				g.head(t, sv, exchange{path: "/realty/1", auth: owner, header: map[string]string{"Accept-Encoding": ae}, want: 200})
			}
		})
		t.Run("codings", func(t *testing.T) {
			identity := g.do(t, sv, exchange{method: "GET", path: "/realty/1", auth: owner, want: 200})
			for _, ae := range []string{"gzip", "br", "zstd", "gzip, deflate, br, zstd", "identity;q=0, zstd"} {
				a := g.do(t, sv, exchange{method: "GET", path: "/realty/1", auth: owner, header: map[string]string{"Accept-Encoding": ae}, want: 200})
				if !bytes.Equal(decoded(t, a), identity.body) || a.Header.Get("Content-Encoding") == "" {
					t.Errorf("Accept-Encoding %q: %s body that does not decode to the identity one", ae, a.Header.Get("Content-Encoding"))
				}
				g.do(t, sv, exchange{method: "GET", path: "/realty/1", auth: owner,
					header: map[string]string{"Accept-Encoding": ae, "If-None-Match": a.Header.Get("ETag")}, want: 304})
			}
			g.do(t, sv, exchange{method: "GET", path: "/realty/1", auth: owner, header: map[string]string{"Accept-Encoding": "identity;q=0"}, want: 406})
			g.do(t, sv, exchange{method: "GET", path: "/realty/1", auth: owner, header: map[string]string{"Accept-Encoding": "*;q=0"}, want: 406})
		})
	})

	var created, numbered answer
	t.Run("create", func(t *testing.T) {
		created = g.do(t, sv, exchange{method: "POST", path: "/realty", auth: otp, body: newListing, want: 201})
		g.do(t, sv, exchange{method: "GET", path: created.Header.Get("Location"), auth: owner, want: 200})
		numbered = g.do(t, sv, exchange{method: "POST", path: "/realty", auth: owner,
			body: `{"no":77,"title":"Numbered","categoryId":1,"location":{"cityId":34},"latitude":41.0,"realtyFiles":[{"imageUrl":"https://example.com/1.jpg","imageType":"IMAGE"}],"attributes":{"price":1.5e6,"priceCurrencyType":"TRY","sideIdList":[1,2],"selectedAttributeList":[{"groupId":1,"selectedIds":[3]}]}}`,
			want: 201})
		for _, tt := range []struct {
			name string
			ex   exchange
		}{
			{name: "used number", ex: exchange{auth: owner, body: `{"no":77,"title":"Again","categoryId":1,"location":{"cityId":34}}`, want: 409}},
			{name: "not JSON", ex: exchange{auth: owner, body: `{"title":`, want: 400, refused: true}},
			{name: "invalid members", ex: exchange{auth: owner, body: `{"title":" ","categoryId":"x","location":{},"extra":1}`, want: 422, refused: true}},
			{name: "not an object", ex: exchange{auth: owner, body: `[]`, want: 422, refused: true}},
			{name: "number over 2^53-1", ex: exchange{auth: owner, body: `{"no":9007199254740992,"title":"Big","categoryId":1,"location":{"cityId":34}}`, want: 422, refused: true}},
			{name: "not a JSON content type", ex: exchange{auth: owner, body: newListing, header: map[string]string{"Content-Type": "text/plain"}, want: 415, refused: true}},
			{name: "compressed", ex: exchange{auth: owner, body: newListing, header: map[string]string{"Content-Encoding": "gzip"}, want: 415, refused: true}},
			{name: "no token", ex: exchange{body: newListing, want: 401, refused: true}},
			{name: "latitude in both places", ex: exchange{auth: owner, body: `{"title":"t","categoryId":1,"location":{"cityId":34,"latitude":41},"latitude":41}`, want: 422, refused: true}},
			{name: "longitude in both places", ex: exchange{auth: owner, body: `{"title":"t","categoryId":1,"location":{"cityId":34,"longitude":29},"longitude":29}`, want: 422, refused: true}},
			{name: "nearLocation in both places", ex: exchange{auth: owner, body: `{"title":"t","categoryId":1,"location":{"cityId":34,"nearLocation":true},"nearLocation":false}`, want: 422, refused: true}},
			{name: "latitude at the top, null in location", ex: exchange{auth: owner, body: `{"title":"t","categoryId":1,"location":{"cityId":34,"latitude":null},"latitude":41}`, want: 201}},
			{name: "If-Match", ex: exchange{auth: owner, body: newListing, header: map[string]string{"If-Match": `"stale"`}, want: 412}},
			{name: "If-None-Match *", ex: exchange{auth: owner, body: newListing, header: map[string]string{"If-None-Match": "*"}, want: 201}},
			{name: "malformed If-Match", ex: exchange{auth: owner, body: newListing, header: map[string]string{"If-Match": "stale"}, want: 400, refused: true}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				tt.ex.method, tt.ex.path = http.MethodPost, "/realty"
				g.do(t, sv, tt.ex)
			})
		}
	})

	t.Run("replace", func(t *testing.T) {
		current := g.do(t, sv, exchange{method: "GET", path: "/realty/1", auth: owner, want: 200})
		asRead := listingBody(t, current, nil)
		g.do(t, sv, exchange{method: "PUT", path: "/realty/1", auth: owner, body: asRead, want: 200})
		g.do(t, sv, exchange{method: "PUT", path: "/realty/1-1", auth: owner, body: listingBody(t, current, func(m map[string]any) {
			m["title"], m["isActive"] = "Renamed", true
		}), want: 200})
		for _, tt := range []struct {
			name string
			ex   exchange
		}{
			{name: "another number", ex: exchange{path: "/realty/1", auth: owner, body: listingBody(t, current, func(m map[string]any) { m["no"] = 5 }), want: 422}},
			{name: "required member missing", ex: exchange{path: "/realty/1", auth: owner, body: listingBody(t, current, func(m map[string]any) { delete(m, "categoryId") }), want: 422, refused: true}},
			{name: "not JSON", ex: exchange{path: "/realty/1", auth: owner, body: `{`, want: 400, refused: true}},
			{name: "malformed ref", ex: exchange{path: "/realty/01", auth: owner, body: asRead, want: 400, refused: true}},
			{name: "another firm's listing", ex: exchange{path: "/realty/1", auth: other, body: asRead, want: 404}},
			{name: "another firm's listing by number", ex: exchange{path: "/realty/1-1", auth: other, body: asRead, want: 404}},
			{name: "no such listing", ex: exchange{path: "/realty/999", auth: owner, body: asRead, want: 404}},
			{name: "not a JSON content type", ex: exchange{path: "/realty/1", auth: owner, body: asRead, header: map[string]string{"Content-Type": "text/plain"}, want: 415, refused: true}},
			{name: "no token", ex: exchange{path: "/realty/1", body: asRead, want: 401, refused: true}},
			{name: "If-Match of an older version", ex: exchange{path: "/realty/1", auth: owner, body: asRead,
				header: map[string]string{"If-Match": current.Header.Get("ETag")}, want: 412}},
			{name: "If-None-Match *", ex: exchange{path: "/realty/1", auth: owner, body: asRead, header: map[string]string{"If-None-Match": "*"}, want: 412}},
			{name: "malformed If-Match", ex: exchange{path: "/realty/1", auth: owner, body: asRead, header: map[string]string{"If-Match": "abc"}, want: 400, refused: true}},
			{name: "malformed If-None-Match", ex: exchange{path: "/realty/1", auth: owner, body: asRead, header: map[string]string{"If-None-Match": `W/abc`}, want: 400, refused: true}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				tt.ex.method = http.MethodPut
				g.do(t, sv, tt.ex)
			})
		}
		latest := g.do(t, sv, exchange{method: "GET", path: "/realty/1", auth: owner, header: map[string]string{"Accept-Encoding": "gzip"}, want: 200})
		written := g.do(t, sv, exchange{method: "PUT", path: "/realty/1", auth: owner, body: asRead,
			header: map[string]string{"If-Match": latest.Header.Get("ETag")}, want: 200})
		if written.Header.Get("ETag") != "" || written.Header.Get("Listing-ETag") == "" || written.Header.Get("Content-Location") != "/realty/1" {
			t.Errorf("PUT answered ETag %q, Listing-ETag %q, Content-Location %q; want none, the new tag, /realty/1",
				written.Header.Get("ETag"), written.Header.Get("Listing-ETag"), written.Header.Get("Content-Location"))
		}
		g.do(t, sv, exchange{method: "PUT", path: "/realty/1", auth: owner, body: asRead,
			header: map[string]string{"If-Match": written.Header.Get("Listing-ETag")}, want: 200})
	})

	t.Run("delete", func(t *testing.T) {
		if created.Response == nil || numbered.Response == nil {
			t.Skip("create failed")
		}
		byID := created.Header.Get("Location")
		var n struct{ ListingID string }
		if err := json.Unmarshal(numbered.body, &n); err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			name string
			ex   exchange
		}{
			{name: "another firm's listing", ex: exchange{path: byID, auth: other, want: 404}},
			{name: "malformed ref", ex: exchange{path: "/realty/1-", auth: owner, want: 400, refused: true}},
			{name: "no token", ex: exchange{path: byID, want: 401, refused: true}},
			{name: "If-Match of another tag", ex: exchange{path: byID, auth: owner, header: map[string]string{"If-Match": `"other"`}, want: 412}},
			{name: "If-Unmodified-Since before it was written", ex: exchange{path: byID, auth: owner,
				header: map[string]string{"If-Unmodified-Since": "Sat, 01 Jan 2000 00:00:00 GMT"}, want: 412}},
			{name: "by id", ex: exchange{path: byID, auth: owner, header: map[string]string{"If-Match": created.Header.Get("ETag")}, want: 204}},
			{name: "again", ex: exchange{path: byID, auth: owner, want: 404}},
			{name: "by number", ex: exchange{path: "/realty/" + n.ListingID, auth: owner, want: 204}},
			{name: "no such listing", ex: exchange{path: "/realty/999", auth: owner, want: 404}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				tt.ex.method = http.MethodDelete
				g.do(t, sv, tt.ex)
			})
		}
		g.do(t, sv, exchange{method: "GET", path: byID, auth: owner, want: 404})
	})

	t.Run("preconditions required", func(t *testing.T) {
		strict := startLiveGateway(t, func(c *Config) { c.RequirePrecondition = true }, time.Minute)
		current := strict.do(t, sv, exchange{method: "GET", path: "/realty/1", auth: owner, want: 200})
		body := listingBody(t, current, nil)
		strict.do(t, sv, exchange{method: "PUT", path: "/realty/1", auth: owner, body: body, want: 428})
		strict.do(t, sv, exchange{method: "PUT", path: "/realty/1", auth: owner, body: body,
			header: map[string]string{"If-None-Match": `"x"`}, want: 428})
		strict.do(t, sv, exchange{method: "DELETE", path: "/realty/1", auth: owner, want: 428})
		strict.do(t, sv, exchange{method: "PUT", path: "/realty/1", auth: owner, body: body,
			header: map[string]string{"If-Match": current.Header.Get("ETag")}, want: 200})
	})

	t.Run("document", func(t *testing.T) {
		checkedIn, err := os.ReadFile("openapi.yaml")
		if err != nil {
			t.Fatal(err)
		}
		first := g.do(t, sv, exchange{method: "GET", path: "/openapi.yaml", want: 200})
		second := g.do(t, sv, exchange{method: "GET", path: "/openapi.yaml", auth: "Bearer not.a.token", want: 200})
		if !bytes.Equal(first.body, checkedIn) || !bytes.Equal(second.body, checkedIn) {
			t.Errorf("GET /openapi.yaml is not the checked-in openapi.yaml (%d and %d bytes, file %d)", len(first.body), len(second.body), len(checkedIn))
		}
		etag := first.Header.Get("ETag")
		if ct := first.Header.Get("Content-Type"); ct != "application/yaml" || etag == "" || second.Header.Get("ETag") != etag {
			t.Errorf("Content-Type %q, ETag %q then %q: want application/yaml and one stable ETag", ct, etag, second.Header.Get("ETag"))
		}
		g.do(t, sv, exchange{method: "GET", path: "/openapi.yaml", header: map[string]string{"If-None-Match": etag}, want: 304})
		g.do(t, sv, exchange{method: "GET", path: "/openapi.yaml", header: map[string]string{"If-None-Match": `"other"`}, want: 200})
		g.head(t, sv, exchange{path: "/openapi.yaml", want: 200})
		for _, ae := range []string{"gzip", "br", "zstd"} {
			a := g.do(t, sv, exchange{method: "GET", path: "/openapi.yaml", header: map[string]string{"Accept-Encoding": ae}, want: 200})
			if !bytes.Equal(decoded(t, a), checkedIn) || len(a.body) >= len(checkedIn)/3 {
				t.Errorf("%s: %d bytes that decode to %d, not the %d of the document, a third or less", ae, len(a.body), len(decoded(t, a)), len(checkedIn))
			}
			g.do(t, sv, exchange{method: "GET", path: "/openapi.yaml", header: map[string]string{"Accept-Encoding": ae, "If-None-Match": a.Header.Get("ETag")}, want: 304})
			g.head(t, sv, exchange{path: "/openapi.yaml", header: map[string]string{"Accept-Encoding": ae}, want: 200})
		}
		g.do(t, sv, exchange{method: "GET", path: "/openapi.yaml", header: map[string]string{"Accept-Encoding": "identity;q=0"}, want: 406})
	})

	t.Run("issuer documents", func(t *testing.T) {
		// An EdDSA key set and an https issuer: the JWKS lists a key, and
		// no discovery document is served, for any issuer.
		keyed := startLiveGateway(t, func(c *Config) { c.JWT.Algorithm, c.JWT.Issuer = "EdDSA", "https://listings.example" }, time.Minute)
		jwks := keyed.do(t, sv, exchange{method: "GET", path: jwksPath, want: 200})
		if !strings.Contains(string(jwks.body), `"kty":"OKP"`) {
			t.Errorf("JWKS %s; want an Ed25519 key", jwks.body)
		}
		keyed.do(t, sv, exchange{method: "GET", path: jwksPath, header: map[string]string{"If-None-Match": jwks.Header.Get("ETag")}, want: 304})
		keyed.do(t, sv, exchange{method: "GET", path: jwksPath, header: map[string]string{"Accept-Encoding": "gzip"}, want: 200})
		keyed.do(t, sv, exchange{method: "GET", path: jwksPath, header: map[string]string{"Accept-Encoding": "identity;q=0"}, want: 406})
		keyed.head(t, sv, exchange{path: jwksPath, want: 200})
		keyed.doUndocumented(t, sv, exchange{method: "GET", path: "/.well-known/openid-configuration", want: 404})
		g.doUndocumented(t, sv, exchange{method: "GET", path: "/.well-known/openid-configuration", want: 404})
	})

	t.Run("undocumented", func(t *testing.T) {
		for _, tt := range []exchange{
			{method: "PATCH", path: "/realty/1", auth: owner, body: "{}", want: 405},
			{method: "POST", path: "/realty/1", auth: owner, body: newListing, want: 405},
			{method: "OPTIONS", path: "/realty/1", want: 405},
			{method: "GET", path: "/realty", auth: owner, want: 405},
			{method: "DELETE", path: "/realty", auth: owner, want: 405},
			{method: "GET", path: "/auth/login", want: 405},
			{method: "POST", path: "/openapi.yaml", body: "{}", want: 405},
			{method: "GET", path: "/realty/1/", auth: owner, want: 404},
			{method: "GET", path: "/REALTY/1", auth: owner, want: 404},
			{method: "GET", path: "/openapi.json", want: 404},
			{method: "FOO", path: "/realty/1", auth: owner, want: 501},
			{method: "QUERY", path: "/realty", auth: owner, want: 501},
		} {
			t.Run(tt.method+" "+tt.path, func(t *testing.T) { g.doUndocumented(t, sv, tt) })
		}
	})

	// Answers of the HTTP server itself, before routing. A body over the
	// limit is refused on its Content-Length, so only the head is sent: a
	// client still writing the body would race the gateway's close.
	t.Run("body over the limit", func(t *testing.T) {
		for _, op := range []struct{ method, path, auth string }{
			{"POST", "/auth/login", ""}, {"POST", "/realty", owner}, {"PUT", "/realty/1", owner},
		} {
			t.Run(op.method+" "+op.path, func(t *testing.T) {
				head := op.method + " " + op.path + " HTTP/1.1\r\nHost: gateway\r\nUser-Agent: openapi-validate-test\r\n" +
					"Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(2<<20) + "\r\n"
				if op.auth != "" {
					head += "Authorization: " + op.auth + "\r\n"
				}
				a, err := g.raw(t, head+"\r\n")
				if err != nil {
					t.Fatal(err)
				}
				if a.StatusCode != http.StatusRequestEntityTooLarge {
					t.Fatalf("status %d, want 413: %s", a.StatusCode, a.body)
				}
				// The request has no body to validate: only the answer is.
				req := g.request(t, exchange{method: op.method, path: op.path, auth: op.auth})
				sv.common(t, req, a)
				rewind(t, req, a)
				if ok, errs := sv.strict.ValidateHttpResponse(req, a.Response); !ok {
					t.Errorf("413 does not match openapi.yaml:%s\nbody: %s", describe(errs), a.body)
				}
				sv.saw(op.method, op.path, a.StatusCode)
			})
		}
	})
	t.Run("head over the limit", func(t *testing.T) {
		for _, op := range []struct{ method, path string }{
			{"POST", "/auth/login"}, {"POST", "/realty"}, {"GET", "/realty/1"}, {"PUT", "/realty/1"}, {"DELETE", "/realty/1"}, {"GET", "/openapi.yaml"}, {"GET", jwksPath},
		} {
			t.Run(op.method+" "+op.path, func(t *testing.T) {
				head := op.method + " " + op.path + " HTTP/1.1\r\nHost: gateway\r\nX-Padding: " + strings.Repeat("p", 9000) + "\r\n\r\n"
				// The gateway answers and closes with part of the head
				// unread, so the kernel may reset the connection before
				// the answer is read: retry, but a 431 must be seen.
				var a answer
				var err error
				for range 20 {
					if a, err = g.raw(t, head); err == nil {
						break
					}
				}
				if err != nil {
					t.Fatalf("no answer in 20 tries: %v", err)
				}
				if a.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
					t.Fatalf("status %d, want 431: %s", a.StatusCode, a.body)
				}
				req := g.request(t, exchange{method: op.method, path: op.path})
				sv.common(t, req, a)
				rewind(t, req, a)
				if ok, errs := sv.strict.ValidateHttpResponse(req, a.Response); !ok {
					t.Errorf("431 does not match openapi.yaml:%s\nbody: %s", describe(errs), a.body)
				}
				sv.saw(op.method, op.path, a.StatusCode)
			})
		}
	})

	t.Run("login limit", func(t *testing.T) {
		limited := startLiveGateway(t, func(c *Config) { c.Login.IPAttempts = 1 }, time.Minute)
		body := loginBody("pw@one.example", testPassword, testKey)
		limited.do(t, sv, exchange{method: "POST", path: "/auth/login", body: body, want: 200})
		limited.do(t, sv, exchange{method: "POST", path: "/auth/login", body: body, want: 429})
	})

	// In CDN mode, with a short freshness: the public and private listing
	// headers, then a stale copy and 503s while the store is down.
	t.Run("CDN mode and store outage", func(t *testing.T) {
		const fresh = 100 * time.Millisecond
		cdn := startLiveGateway(t, cdnMode, fresh)
		active := cdn.do(t, sv, exchange{method: "GET", path: "/realty/1", auth: owner, want: 200})
		if active.Header.Get("Surrogate-Key") == "" || !strings.HasPrefix(active.Header.Get("Cache-Control"), "public") {
			t.Errorf("an active listing in CDN mode: Surrogate-Key %q, Cache-Control %q", active.Header.Get("Surrogate-Key"), active.Header.Get("Cache-Control"))
		}
		cdn.do(t, sv, exchange{method: "GET", path: "/realty/2", auth: owner, want: 200})
		cdn.do(t, sv, exchange{method: "GET", path: "/realty/1-1", auth: other, header: map[string]string{"If-None-Match": active.Header.Get("ETag")}, want: 304})
		time.Sleep(2 * fresh)
		cdn.store.down.Store(true)
		stale := cdn.do(t, sv, exchange{method: "GET", path: "/realty/1", auth: owner, want: 200})
		if stale.Header.Get("X-Cache") != "STALE" || stale.Header.Get("Age") == "" {
			t.Errorf("X-Cache %q, Age %q: want a stale copy", stale.Header.Get("X-Cache"), stale.Header.Get("Age"))
		}
		body := listingBody(t, active, nil)
		for _, ex := range []exchange{
			{method: "GET", path: "/realty/5", auth: owner},
			{method: "POST", path: "/auth/login", body: loginBody("pw@one.example", testPassword, testKey)},
			{method: "POST", path: "/realty", auth: owner, body: newListing},
			{method: "PUT", path: "/realty/1", auth: owner, body: body},
			{method: "DELETE", path: "/realty/1", auth: owner},
		} {
			t.Run(ex.method+" "+ex.path, func(t *testing.T) {
				ex.want = http.StatusServiceUnavailable
				cdn.do(t, sv, ex)
			})
		}
	})

	if t.Failed() {
		return
	}
	var missing []string
	for path, item := range sv.model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			for code := range op.Responses.Codes.KeysFromOldest() {
				if key := strings.ToUpper(method) + " " + path + " " + code; !sv.seen[key] {
					missing = append(missing, key)
				}
			}
		}
	}
	if len(missing) > 0 {
		t.Errorf("documented but never answered here: %q; seen %q", missing, slices.Sorted(maps.Keys(sv.seen)))
	}
}
