// Package observability_test ties the operator's files in this directory
// to the code. alerts.yaml (Prometheus rules), dashboard.json (Grafana)
// and prometheus.yml (the Compose profile's scrape configuration) name
// metrics; a running gateway, with Redis and a CDN purge API configured so
// that every series it can export exists, must export each of them. The
// rules are checked and unit-tested by promtool (alerts_test.yaml), and
// the dashboard's PromQL is parsed by promtool too. promtool comes from
// Prometheus's tools (Debian: package prometheus, which .ci/run installs);
// without it these tests skip, and fail under
// GATEWAY_TEST_REQUIRE_SERVICES=1.
package observability_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"

	"github.com/realty-gateway/gateway/internal/gatewaytest"
	"github.com/realty-gateway/gateway/internal/testenv"
)

// synthetic are series that Prometheus makes itself, not the gateway.
var synthetic = map[string]bool{"up": true}

type rule struct {
	Record      string            `yaml:"record"`
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func readRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	var rules []rule
	for _, g := range file.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatal("alerts.yaml holds no rules")
	}
	return rules
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int                `json:"id"`
	Type       string             `json:"type"`
	Title      string             `json:"title"`
	Datasource *datasource        `json:"datasource"`
	GridPos    struct{ X, W int } `json:"gridPos"`
	Targets    []struct {
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	return d
}

// allPanels flattens rows.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// grafanaVariables stand in for the dashboard's variables, so that its
// queries are PromQL that promtool parses.
var grafanaVariables = strings.NewReplacer(
	"$__rate_interval", "5m", "${__rate_interval}", "5m", "$__interval", "1m", "$__range", "1h",
	"${instance}", ".+", "$instance", ".+",
)

// labelValues is Grafana's variable query label_values(selector, label).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*[A-Za-z_][A-Za-z0-9_]*\)$`)

// dashboardQueries returns every PromQL expression of the dashboard,
// variables substituted, keyed by where it is ("panel 3 target 0").
func dashboardQueries(t *testing.T, d dashboard) map[string]string {
	t.Helper()
	queries := map[string]string{}
	for _, p := range allPanels(d.Panels) {
		for i, target := range p.Targets {
			queries[fmt.Sprintf("dashboard.json panel %d %q target %d", p.ID, p.Title, i)] = grafanaVariables.Replace(target.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				t.Fatalf("variable %s: query %s", v.Name, v.Query)
			}
		}
		m := labelValues.FindStringSubmatch(strings.TrimSpace(q.Query))
		if m == nil {
			t.Fatalf("variable %s: %q is not label_values(selector, label)", v.Name, q.Query)
		}
		queries["dashboard.json variable "+v.Name] = grafanaVariables.Replace(m[1])
	}
	return queries
}

// usedMetrics returns, for each expression of the rules and the dashboard,
// where it is and the metric names it selects; and the recorded names.
func usedMetrics(t *testing.T) (uses map[string][]string, recorded map[string]bool) {
	t.Helper()
	uses, recorded = map[string][]string{}, map[string]bool{}
	exprs := map[string]string{}
	for i, r := range readRules(t) {
		exprs[fmt.Sprintf("alerts.yaml rule %d (%s%s)", i, r.Alert, r.Record)] = r.Expr
		if r.Record != "" {
			recorded[r.Record] = true
		}
	}
	maps.Copy(exprs, dashboardQueries(t, readDashboard(t)))
	for where, expr := range exprs {
		names, err := metricNames(expr)
		if err != nil {
			t.Errorf("%s: %v", where, err)
		}
		if len(names) == 0 {
			t.Errorf("%s selects no metric: %q", where, expr)
		}
		uses[where] = names
	}
	return uses, recorded
}

// usedSelectors returns, for each expression of the rules and the
// dashboard, where it is and its selectors.
func usedSelectors(t *testing.T) map[string][]selector {
	t.Helper()
	exprs := map[string]string{}
	for i, r := range readRules(t) {
		exprs[fmt.Sprintf("alerts.yaml rule %d (%s%s)", i, r.Alert, r.Record)] = r.Expr
	}
	maps.Copy(exprs, dashboardQueries(t, readDashboard(t)))
	out := map[string][]selector{}
	for where, expr := range exprs {
		sels, err := selectors(expr)
		if err != nil {
			t.Errorf("%s: %v", where, err)
		}
		out[where] = sels
	}
	return out
}

// TestRulesAndDashboardUseExistingMetrics runs a gateway on Redis with a
// CDN purge API. Fresh, before any request, its /metrics must hold every
// series that a rule or a panel names: a panel without it shows "No data",
// and rate() misses the first events. Then it drives a login, a limited
// login, a view and a write through it, scrapes /metrics again, and fails
// for every metric name that a rule or a panel uses and the gateway does
// not export (a histogram's _bucket, _sum and _count count as exported
// with it; recording rules' names as recorded).
func TestRulesAndDashboardUseExistingMetrics(t *testing.T) {
	uses, recorded := usedMetrics(t)
	fresh, exercised := scrapeLiveGateway(t)

	t.Run("exported", func(t *testing.T) {
		var all []string
		for where, names := range uses {
			for _, name := range names {
				all = append(all, name)
				if !exercised.names[name] && !recorded[name] && !synthetic[name] {
					t.Errorf("%s uses %s, which the running gateway does not export", where, name)
				}
			}
		}
		// The check cannot pass by reading nothing.
		for _, name := range []string{"gateway_http_requests_total", "gateway_http_request_duration_seconds_bucket",
			"gateway_breaker_state", "gateway_cache_requests_total", "go_memstats_heap_inuse_bytes"} {
			if !slices.Contains(all, name) {
				t.Errorf("no rule or panel uses %s: the extraction misses names", name)
			}
		}
		slices.Sort(all)
		all = slices.Compact(all)
		t.Logf("%d metric names used: %q", len(all), all)
	})
	t.Run("fresh", func(t *testing.T) {
		checkFresh(t, usedSelectors(t), fresh, exercised, recorded)
	})
}

// targetLabels are the labels that Prometheus adds to every series it
// scrapes; openLabels take values that no gateway can list in advance (a
// selector that names one of their values is still checked).
var (
	targetLabels = map[string]bool{"instance": true, "job": true}
	openLabels   = map[string]bool{"code": true, "le": true, "quantile": true}
)

// withoutRedis are series that a selector names for a gateway without
// Redis, which the test's gateway (with Redis) does not have: there the
// local tier answers the negative entries too.
var withoutRedis = map[string]bool{`gateway_cache_requests_total{tier="local",result="negative"}`: true}

// literals matches a regular expression that is an alternation of
// literal values, which a matcher names each of.
var literals = regexp.MustCompile(`^[A-Za-z0-9_/:.\-]+(\|[A-Za-z0-9_/:.\-]+)*$`)

// checkFresh fails for every series of the gateway's that a selector
// names and the fresh gateway lacks: each selector (without the target's
// labels) must match a fresh series, once for each value of a matcher
// that lists values ("GET|HEAD"); and every label value that the exercised
// gateway shows on a named metric must be on the fresh one, but for open
// labels.
func checkFresh(t *testing.T, used map[string][]selector, fresh, exercised scrape, recorded map[string]bool) {
	named := map[string]bool{}
	checked := 0
	for _, where := range slices.Sorted(maps.Keys(used)) {
		for _, sel := range used[where] {
			if recorded[sel.name] || synthetic[sel.name] {
				continue
			}
			named[sel.name] = true
			var ms []matcher
			for _, m := range sel.matchers {
				if !targetLabels[m.label] {
					ms = append(ms, m)
				}
			}
			for _, want := range expand(ms) {
				if withoutRedis[sel.name+fmtMatchers(want)] {
					continue
				}
				checked++
				if !slices.ContainsFunc(fresh.series[sel.name], func(labels map[string]string) bool { return matches(t, labels, want) }) {
					t.Errorf("%s names %s%s, which a fresh gateway does not export: create it at 0 from the start", where, sel.name, fmtMatchers(want))
				}
			}
		}
	}
	for name := range named {
		for label, values := range valuesByLabel(exercised.series[name]) {
			if openLabels[label] {
				continue
			}
			had := valuesByLabel(fresh.series[name])[label]
			for v := range values {
				checked++
				if !had[v] {
					t.Errorf("%s{%s=%q} appears once used; a panel or an alert names it: create it at 0 from the start", name, label, v)
				}
			}
		}
	}
	// The check cannot pass by reading nothing.
	for _, s := range []string{"gateway_ratelimit_rejections_total", "gateway_auth_failures_total", "gateway_logins_total",
		"gateway_store_requests_total", "gateway_http_request_duration_seconds_bucket"} {
		if !named[s] {
			t.Errorf("no rule or panel names %s: the extraction misses selectors", s)
		}
	}
	t.Logf("%d series checked on the fresh gateway", checked)
}

// expand returns ms once for each combination of the values of its
// matchers that list values.
func expand(ms []matcher) [][]matcher {
	out := [][]matcher{nil}
	for _, m := range ms {
		values := []string{m.value}
		if m.op == "=~" && literals.MatchString(m.value) {
			values = strings.Split(m.value, "|")
		}
		var next [][]matcher
		for _, prefix := range out {
			for _, v := range values {
				op := m.op
				if len(values) > 1 {
					op = "="
				}
				next = append(next, append(slices.Clone(prefix), matcher{label: m.label, op: op, value: v}))
			}
		}
		out = next
	}
	return out
}

// fmtMatchers writes matchers as PromQL does.
func fmtMatchers(ms []matcher) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.label + m.op + strconv.Quote(m.value)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// matches reports whether a series' labels satisfy every matcher.
func matches(t *testing.T, labels map[string]string, ms []matcher) bool {
	t.Helper()
	for _, m := range ms {
		v := labels[m.label]
		var ok bool
		switch m.op {
		case "=":
			ok = v == m.value
		case "!=":
			ok = v != m.value
		case "=~", "!~":
			re, err := regexp.Compile("^(?:" + m.value + ")$")
			if err != nil {
				t.Fatalf("matcher %v: %v", m, err)
			}
			ok = re.MatchString(v) == (m.op == "=~")
		}
		if !ok {
			return false
		}
	}
	return true
}

// valuesByLabel returns the values of each label across series.
func valuesByLabel(series []map[string]string) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, labels := range series {
		for l, v := range labels {
			if out[l] == nil {
				out[l] = map[string]bool{}
			}
			out[l][v] = true
		}
	}
	return out
}

// scrapeLiveGateway starts the gateway with every optional part on and
// scrapes its /metrics fresh, then again once a login, a refused login, a
// limited login, a write and a view went through it.
func scrapeLiveGateway(t *testing.T) (fresh, exercised scrape) {
	t.Helper()
	redisAddr := testenv.RedisAddr(t)
	bin, err := gatewaytest.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cdn := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(cdn.Close)
	prefix := testenv.RandomName("obs") + ":"
	t.Cleanup(func() {
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
		defer rdb.Close()
		ctx := context.Background()
		_ = testenv.DeleteKeys(ctx, rdb, prefix+"*")
	})
	env := map[string]string{
		"GATEWAY_DATA_DIR":               t.TempDir(),
		"GATEWAY_REDIS_URL":              "redis://" + redisAddr + "/0",
		"GATEWAY_REDIS_PREFIX":           prefix,
		"GATEWAY_JWT_SECRET":             "observability-test-secret-0123456789",
		"GATEWAY_CDN_PURGE_URL":          cdn.URL + "/purge/{key}",
		"GATEWAY_LOGIN_ACCOUNT_FAILURES": "1",
	}
	firm := gatewaytest.Admin(t, bin, env, "", "firm", "add", "--name", "Observed Realty")
	key := firm["apiKey"].(string)
	gatewaytest.Admin(t, bin, env, "correct-horse-battery\n", "user", "add", "--firm", fmt.Sprint(firm["firmId"]),
		"--email", "agent@observed.example", "--password-stdin")
	p := gatewaytest.Start(t, bin, env)
	fresh = scrapeMetrics(t, p.AdminBase+"/metrics")

	send := func(method, path, token, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, p.Base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	login := func(password string) (int, []byte) {
		return send("POST", "/auth/login", "", fmt.Sprintf(`{"email":"agent@observed.example","password":%q,"key":%q}`, password, key))
	}
	code, body := login("correct-horse-battery")
	var tok struct {
		JWTToken string `json:"jwtToken"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &tok) != nil {
		t.Fatalf("login: %d %s", code, body)
	}
	// One failure per account: the second wrong password is refused by the
	// limit (gateway_ratelimit_rejections_total).
	for _, want := range []int{http.StatusUnauthorized, http.StatusTooManyRequests} {
		if code, body := login("wrong"); code != want {
			t.Fatalf("wrong password: %d %s, want %d", code, body, want)
		}
	}
	code, body = send("POST", "/realty", tok.JWTToken, `{"title":"Observed","categoryId":1,"location":{"cityId":6}}`)
	var created struct {
		ID int64 `json:"id"`
	}
	if code != http.StatusCreated || json.Unmarshal(body, &created) != nil {
		t.Fatalf("create: %d %s", code, body)
	}
	if code, body := send("GET", fmt.Sprintf("/realty/%d", created.ID), tok.JWTToken, ""); code != http.StatusOK {
		t.Fatalf("view: %d %s", code, body)
	}

	return fresh, scrapeMetrics(t, p.AdminBase+"/metrics")
}

// scrape is what /metrics held: the names exported (for each histogram or
// summary the names of its series too), and each sample's labels by name.
type scrape struct {
	names  map[string]bool
	series map[string][]map[string]string
}

func scrapeMetrics(t *testing.T, url string) scrape {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return readExposition(t, resp.Body)
}

// sampleLabel is one label of a sample line.
var sampleLabel = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// readExposition reads the Prometheus text format.
func readExposition(t *testing.T, r io.Reader) scrape {
	t.Helper()
	names := map[string]bool{}
	series := map[string][]map[string]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			f := strings.Fields(rest)
			if len(f) != 2 {
				t.Fatalf("/metrics: %q", line)
			}
			names[f[0]] = true
			switch f[1] {
			case "histogram":
				names[f[0]+"_bucket"], names[f[0]+"_sum"], names[f[0]+"_count"] = true, true, true
			case "summary":
				names[f[0]+"_sum"], names[f[0]+"_count"] = true, true
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.IndexAny(line, "{ ")
		if i <= 0 {
			t.Fatalf("/metrics: %q", line)
		}
		name, labels := line[:i], map[string]string{}
		names[name] = true
		if line[i] == '{' {
			end := strings.LastIndexByte(line, '}')
			for _, m := range sampleLabel.FindAllStringSubmatch(line[i+1:end], -1) {
				labels[m[1]] = m[2]
			}
		}
		series[name] = append(series[name], labels)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return scrape{names: names, series: series}
}

// promtool returns promtool's path; without it the test skips, or fails
// under GATEWAY_TEST_REQUIRE_SERVICES=1.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if testenv.RequireServices() {
			t.Fatalf("promtool not found and GATEWAY_TEST_REQUIRE_SERVICES=1 (Debian: apt-get install prometheus): %v", err)
		}
		t.Skipf("SKIP: promtool not found (Debian: apt-get install prometheus): %v", err)
	}
	return path
}

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(promtool(t), args...).CombinedOutput()
	if err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestPromtool: the rules are valid and their unit tests pass; the
// Compose profile's Prometheus configuration is valid and loads them.
func TestPromtool(t *testing.T) {
	runPromtool(t, "check", "rules", "alerts.yaml")
	runPromtool(t, "test", "rules", "alerts_test.yaml")
	runPromtool(t, "check", "config", "prometheus.yml")
}

// TestDashboardQueriesParse gives each of the dashboard's queries to
// promtool as a recording rule, which it parses as Prometheus would.
func TestDashboardQueriesParse(t *testing.T) {
	tool := promtool(t)
	queries := dashboardQueries(t, readDashboard(t))
	var group struct {
		Groups []map[string]any `yaml:"groups"`
	}
	var rules []map[string]string
	for _, where := range slices.Sorted(maps.Keys(queries)) {
		rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:query:%d", len(rules)), "expr": queries[where]})
	}
	group.Groups = []map[string]any{{"name": "dashboard", "rules": rules}}
	b, err := yaml.Marshal(group)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(tool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("the dashboard's queries, as rules: %v\n%s\n%s", err, out, b)
	}
}

// TestAlertsAreDocumentedAndTested: every alert has a severity, a
// summary, a description and a runbook entry in docs/operating.md's
// "Dashboards and alerts" section, and alerts_test.yaml has for each alert
// a case that fires it and one that does not.
func TestAlertsAreDocumentedAndTested(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Dashboards and alerts\n")
	if !ok {
		t.Fatal(`docs/operating.md has no section "## Dashboards and alerts"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	alerts := map[string]bool{}
	for _, r := range readRules(t) {
		if r.Alert == "" {
			continue
		}
		alerts[r.Alert] = true
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
		}
		for _, a := range []string{"summary", "description", "runbook"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("%s has no %s", r.Alert, a)
			}
		}
		if want := `docs/operating.md, "Dashboards and alerts", ` + r.Alert; r.Annotations["runbook"] != want {
			t.Errorf("%s: runbook %q, want %q", r.Alert, r.Annotations["runbook"], want)
		}
		if !strings.Contains(section, "**"+r.Alert+"**") {
			t.Errorf("docs/operating.md's Dashboards and alerts has no runbook entry **%s**", r.Alert)
		}
	}

	b, err := os.ReadFile("alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			Name   string `yaml:"name"`
			Alerts []struct {
				Alertname string `yaml:"alertname"`
				Expected  []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &tests); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.Alerts {
			if !alerts[a.Alertname] {
				t.Errorf("alerts_test.yaml %q tests %s, which alerts.yaml does not define", tc.Name, a.Alertname)
			}
			if len(a.Expected) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for a := range alerts {
		if !fires[a] || !quiet[a] {
			t.Errorf("alerts_test.yaml: %s has a firing case %v and a quiet one %v; want both", a, fires[a], quiet[a])
		}
	}
}

// TestDashboardShape: unique panel ids, panels inside the 24-column grid,
// every query on the dashboard's datasource variable, so that an import
// asks which Prometheus to use.
func TestDashboardShape(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" {
		t.Error("no uid: provisioning would give the dashboard a new one on each load")
	}
	ids := map[int]bool{}
	for _, p := range allPanels(d.Panels) {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q leaves the grid", p.Title)
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, ds := range []*datasource{p.Datasource} {
			if ds == nil || ds.UID != "${datasource}" {
				t.Errorf("panel %q: datasource %v, want the ${datasource} variable", p.Title, ds)
			}
		}
		for i, target := range p.Targets {
			if target.Datasource == nil || target.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q target %d: datasource %v, want the ${datasource} variable", p.Title, i, target.Datasource)
			}
		}
	}
}
