package e2e

// The harness the end-to-end tests share: the binaries, gateway processes
// and admin commands, HTTP requests and logins, the world of firms and
// listings they log in to, Redis keys, metrics and waiting.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/realty-gateway/gateway/internal/gatewaytest"
	"github.com/realty-gateway/gateway/internal/testenv"
)

// gatewayBin is the binary TestMain builds; the tests only read it.
var gatewayBin string

// TestMain builds the gateway from the module root once for all tests.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gateway-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	gatewayBin, err = gatewaytest.Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "build gateway:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	faultBinOnce sync.Once
	faultBin     string
	faultBinErr  error
)

// faultGateway is the gateway built with fault points (internal/faultpoint),
// beside gatewayBin, on the first call.
func faultGateway(t *testing.T) string {
	t.Helper()
	faultBinOnce.Do(func() {
		faultBin, faultBinErr = gatewaytest.BuildTagged(filepath.Dir(gatewayBin), "gateway-faultpoints", "faultpoints")
	})
	if faultBinErr != nil {
		t.Fatal(faultBinErr)
	}
	return faultBin
}

// e2eSecret is the JWT signing secret (kid "default") of the environments
// made here.
const e2eSecret = "e2e-secret-e2e-secret-e2e-secret-e2e"

// environment is the environment of one gateway process and its admin
// commands.
type environment map[string]string

// sqliteEnv is a gateway on the embedded store in a fresh data directory,
// without Redis.
func sqliteEnv(t *testing.T) environment {
	dir := t.TempDir()
	return environment{
		"GATEWAY_DATA_DIR":   dir,
		"GATEWAY_STORE_URL":  "sqlite:" + filepath.Join(dir, "gateway.db"),
		"GATEWAY_JWT_SECRET": e2eSecret,
	}
}

// postgresEnv is a gateway on a fresh PostgreSQL database and Redis with a
// key prefix of its own, whose keys are removed when the test ends. A
// write waits for the other gateways' acknowledgements as long as by
// default (GATEWAY_INVALIDATION_WAIT, the local tier's max age): a copy
// that a slow gateway still holds has aged out by then.
func postgresEnv(t *testing.T, pgURL, redisAddr string) (environment, string) {
	t.Helper()
	prefix := testenv.RandomName("e2e") + ":"
	t.Cleanup(func() { deleteKeys(t, prefix) })
	return environment{
		"GATEWAY_DATA_DIR":     t.TempDir(),
		"GATEWAY_STORE_URL":    pgURL,
		"GATEWAY_REDIS_URL":    "redis://" + redisAddr + "/0",
		"GATEWAY_REDIS_PREFIX": prefix,
		"GATEWAY_JWT_SECRET":   e2eSecret,
	}, prefix
}

// deleteKeys removes the keys under prefix from the shared Redis.
func deleteKeys(t *testing.T, prefix string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer rdb.Close()
	ctx := context.Background()
	_ = testenv.DeleteKeys(ctx, rdb, prefix+"*")
}

// coldCache removes the keys that the import published, so that reads
// start with misses.
func coldCache(t *testing.T, prefix string) {
	t.Helper()
	deleteKeys(t, prefix)
}

// listingKeys are the two Redis keys of listing id, number firm-no.
func listingKeys(prefix string, id, firm, no int64) []string {
	return []string{fmt.Sprintf("%srealty:id:%d", prefix, id), fmt.Sprintf("%srealty:listing:%d-%d", prefix, firm, no)}
}

// admin runs an admin subcommand that must succeed and returns the JSON
// line it prints.
func admin(t *testing.T, e environment, stdin string, args ...string) map[string]any {
	t.Helper()
	return gatewaytest.Admin(t, gatewayBin, e, stdin, args...)
}

// gatewayCmd runs the binary with args and stdin in e's data dir and
// returns its exit code and standard output.
func gatewayCmd(t *testing.T, e environment, stdin string, args ...string) (int, string) {
	t.Helper()
	code, out, _ := gatewayCmdStderr(t, e, stdin, args...)
	return code, out
}

// gatewayCmdStderr is gatewayCmd that also returns standard error.
func gatewayCmdStderr(t *testing.T, e environment, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(gatewayBin, args...)
	cmd.Env = gatewaytest.Environ(e)
	cmd.Dir = e["GATEWAY_DATA_DIR"]
	cmd.Stdin = strings.NewReader(stdin)
	var outBuf, errBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outBuf, &errBuf
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, outBuf.String(), errBuf.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), outBuf.String(), errBuf.String()
	default:
		t.Fatal(err)
		return -1, "", ""
	}
}

// process is a running gateway, stopped when its test ends.
type process struct {
	*gatewaytest.Process
}

// start runs the gateway binary with e and waits until it is ready.
func start(t *testing.T, e environment) *process {
	t.Helper()
	return &process{gatewaytest.Start(t, gatewayBin, e)}
}

// response is an answer read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request to p's public listener and reads the whole answer.
// A header value "<none>" removes that header. It does not fail the test,
// so goroutines may call it.
func (p *process) do(method, path string, header map[string]string, body string) (response, error) {
	req, err := http.NewRequest(method, p.Base+path, strings.NewReader(body))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("User-Agent", "e2e-test")
	for k, v := range header {
		if v == "<none>" {
			v = "" // net/http then sends no such header at all
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}, err
}

// request is do that fails the test on a transport error.
func (p *process) request(t *testing.T, method, path string, header map[string]string, body string) response {
	t.Helper()
	r, err := p.do(method, path, header, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// send makes one request with tok, and a JSON body when there is one,
// without failing the test from a goroutine.
func send(p *process, method, path, tok, body string) (response, error) {
	header := map[string]string{"Authorization": "Bearer " + tok}
	if body != "" {
		header["Content-Type"] = "application/json"
	}
	return p.do(method, path, header, body)
}

// view reads a listing with a bearer token.
func (p *process) view(t *testing.T, path, token string) response {
	t.Helper()
	return p.request(t, http.MethodGet, path, map[string]string{"Authorization": "Bearer " + token}, "")
}

// login posts a login body.
func (p *process) login(t *testing.T, body string) response {
	t.Helper()
	return p.request(t, http.MethodPost, "/auth/login", map[string]string{"Content-Type": "application/json"}, body)
}

// token logs in with body and returns the token; anything but 200 fails
// the test.
func (p *process) token(t *testing.T, body string) string {
	t.Helper()
	r := p.login(t, body)
	var out struct {
		JWTToken string `json:"jwtToken"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &out) != nil || out.JWTToken == "" {
		t.Fatalf("login %s: %d %s", body, r.status, r.body)
	}
	return out.JWTToken
}

// titleOf is the title of a listing read with 200; anything else fails
// the test.
func titleOf(t *testing.T, r response) string {
	t.Helper()
	var l struct{ Title string }
	if r.status != http.StatusOK || json.Unmarshal(r.body, &l) != nil {
		t.Fatalf("view: %d %s", r.status, r.body)
	}
	return l.Title
}

// put writes version of a listing, titled "v<version>", and returns how
// long the write took; anything but 200 fails the test.
func put(t *testing.T, p *process, path, tok string, version int) time.Duration {
	t.Helper()
	began := time.Now()
	r := p.request(t, http.MethodPut, path, map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json"},
		fmt.Sprintf(`{"title":"v%d","categoryId":2,"location":{"cityId":34}}`, version))
	if r.status != http.StatusOK {
		t.Fatalf("PUT v%d: %d %s", version, r.status, r.body)
	}
	return time.Since(began)
}

// requestIDMember is the one member in which two alike problem bodies
// differ: it names the request.
var requestIDMember = regexp.MustCompile(`"requestId":"[^"]*",?`)

// requireSameRejection fails unless got answers exactly as want does:
// status, the headers a client reads, and the body but for its requestId.
func requireSameRejection(t *testing.T, what string, got, want response) {
	t.Helper()
	if got.status != http.StatusUnauthorized || want.status != http.StatusUnauthorized {
		t.Fatalf("%s: status %d, reference %d; want both 401:\n%s\n%s", what, got.status, want.status, got.body, want.body)
	}
	for _, h := range []string{"Content-Type", "Www-Authenticate", "Cache-Control", "Retry-After"} {
		if got.header.Get(h) != want.header.Get(h) {
			t.Fatalf("%s: %s %q, reference %q", what, h, got.header.Get(h), want.header.Get(h))
		}
	}
	gotBody, wantBody := requestIDMember.ReplaceAll(got.body, nil), requestIDMember.ReplaceAll(want.body, nil)
	if !bytes.Equal(gotBody, wantBody) {
		t.Fatalf("%s answers otherwise than the reference:\n%s\n%s", what, got.body, want.body)
	}
}

// adminStatus is the status with which p's admin listener answers a GET.
func (p *process) adminStatus(t *testing.T, path string) int {
	t.Helper()
	resp, err := http.Get(p.AdminBase + path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// metrics is the text of p's /metrics.
func (p *process) metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(p.AdminBase + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// metric reads one series' value from p's /metrics, by its exact name and
// labels as exposed (`name` or `name{a="b"}`); false when it is absent.
func (p *process) metric(t *testing.T, series string) (float64, bool) {
	t.Helper()
	for line := range strings.Lines(p.metrics(t)) {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// within polls cond every 5 ms until it reports true and returns how long
// that took, failing the test after d. d is a bound the product keeps (a
// lease, a server's idle timeout) plus testenv.Patience; what has no such
// bound waits with eventually.
func within(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	began := time.Now()
	for !cond() {
		if time.Since(began) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(began)
}

// eventually is within testenv.Patience: for what must happen, however
// busy the machine. The duration it returns is for logs, never asserted.
func eventually(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	return within(t, testenv.Patience(), what, cond)
}

// world is one firm with a password user and a passwordless user, a
// second firm, and imported listings, created through the admin commands.
type world struct {
	env          environment
	key, key2    string
	firm, firm2  int64
	pwUser       int64
	password     string
	importedJSON string
}

const importFile = `[
 {"id": 1001, "no": 7, "firmId": %[1]d, "firmUserId": %[2]d, "title": "Sea view", "categoryId": 2, "latitude": 41.01, "longitude": 28.97, "nearLocation": true,
  "location": {"cityId": 34, "cityName": "Istanbul"}, "realtyFiles": [{"id": 5, "imageUrl": "https://img.example/5.jpg", "sortOrder": 1, "imageType": "IMAGE", "status": "APPROVED"}],
  "createdDate": 1700000000000, "updatedDate": 1700000100000,
  "attributes": {"price": 100, "priceCurrencyType": "TRY", "sideIdList": [1, 2], "selectedAttributeList": [{"groupId": 3, "selectedIds": [4]}]}},
 {"firmId": %[1]d, "firmUserId": %[2]d, "title": "Passive one", "isActive": false, "categoryId": 1, "location": {"cityId": 6}},
 {"firmId": %[1]d, "firmUserId": %[2]d, "title": "Third", "categoryId": 1, "location": {"cityId": 6}}
]`

// The listings of importFile without a number get the firm's first free
// numbers: its counter starts at 1, and the given 7 is not in the way.
const (
	passiveNo = 1 // "Passive one"
	thirdNo   = 2 // "Third"
)

// newWorld creates the world in the store of e.
func newWorld(t *testing.T, e environment) world {
	t.Helper()
	w := world{env: e, password: "s3cret-pass-word"}
	f := admin(t, e, "", "firm", "add", "--name", "Acme Realty")
	w.firm, w.key = int64(f["firmId"].(float64)), f["apiKey"].(string)
	f2 := admin(t, e, "", "firm", "add", "--name", "Other Realty")
	w.firm2, w.key2 = int64(f2["firmId"].(float64)), f2["apiKey"].(string)
	u := admin(t, e, "", "user", "add", "--firm", fmt.Sprint(w.firm), "--email", "Agent@Acme.example", "--password", w.password)
	w.pwUser = int64(u["firmUserId"].(float64))
	admin(t, e, "", "user", "add", "--firm", fmt.Sprint(w.firm), "--email", "otp@acme.example")
	admin(t, e, "", "user", "add", "--firm", fmt.Sprint(w.firm2), "--email", "agent@other.example", "--password", w.password)
	w.importedJSON = fmt.Sprintf(importFile, w.firm, w.pwUser)
	if got := admin(t, e, w.importedJSON, "listing", "import", "-"); got["imported"] != 3.0 {
		t.Fatalf("import printed %v", got)
	}
	return w
}

// passwordLogin is the login body of the first firm's password user.
func (w world) passwordLogin() string {
	return fmt.Sprintf(`{"email":" agent@acme.EXAMPLE ","password":%q,"key":%q}`, w.password, w.key)
}

// otpLogin is the login body of the first firm's passwordless user.
func (w world) otpLogin() string {
	return fmt.Sprintf(`{"email":"otp@acme.example","key":%q}`, w.key)
}

// otherLogin is the login body of the second firm's user.
func (w world) otherLogin() string {
	return fmt.Sprintf(`{"email":"agent@other.example","password":%q,"key":%q}`, w.password, w.key2)
}
