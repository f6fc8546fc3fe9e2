// Package deploy checks the deploy files (docker-compose.yml, deploy/) as
// text; deploy/compose/check.sh runs the image and the Compose stack (on
// podman, with stand-ins for the official images). Each check names what a
// reviewer found wrong once. The tests
// change the working directory, so none runs in parallel.
package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	gatewayconfig "github.com/realty-gateway/gateway/internal/config"
	"github.com/realty-gateway/gateway/internal/settings"
)

// inRepositoryRoot runs the rest of t in the repository root, from which
// the deploy files name each other.
func inRepositoryRoot(t *testing.T) {
	t.Chdir("..")
}

// knownVariables are the variables the binary reads.
func knownVariables() map[string]bool {
	known := map[string]bool{"GATEWAY_CONFIG": true}
	for _, s := range settings.Walk(gatewayconfig.Defaults(), gatewayconfig.EnvPrefix) {
		known[s.Env] = true
	}
	return known
}

func readYAMLDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, doc)
	}
}

// at walks a decoded YAML document: at(doc, "spec", "template", 0, …).
func at(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// pinnedImage is an image tag with at least major.minor ("v" allowed, as
// prom/prometheus tags): "redis:7" floats.
var pinnedImage = regexp.MustCompile(`^[a-z0-9./-]+:v?[0-9]+\.[0-9]+[0-9A-Za-z.-]*$`)

func TestComposeFile(t *testing.T) {
	inRepositoryRoot(t)
	known := knownVariables()
	compose := readYAMLDocs(t, "docker-compose.yml")[0]
	services, _ := compose["services"].(map[string]any)
	byProfile := map[string][]string{}
	for name, svc := range services {
		profile := strings.Join(asStrings(at(svc, "profiles")), ",")
		byProfile[profile] = append(byProfile[profile], name)
	}
	for profile, want := range map[string][]string{"": {"gateway", "postgres", "redis"}, "observability": {"grafana", "prometheus"}} {
		if got := slices.Sorted(slices.Values(byProfile[profile])); !slices.Equal(got, want) {
			t.Errorf("services of profile %q: %v, want %v", profile, got, want)
		}
	}
	for name, svc := range services {
		if at(svc, "healthcheck", "test") == nil {
			t.Errorf("service %s has no healthcheck", name)
		}
		if at(svc, "restart") == nil {
			t.Errorf("service %s has no restart policy", name)
		}
		if image, _ := at(svc, "image").(string); !pinnedImage.MatchString(image) {
			t.Errorf("service %s image %q is not pinned to a version", name, image)
		}
		env, _ := at(svc, "environment").(map[string]any)
		for v := range env {
			if strings.HasPrefix(v, "GATEWAY_") && !known[v] {
				t.Errorf("service %s sets %s, which the gateway does not read", name, v)
			}
		}
		if deps, ok := at(svc, "depends_on").(map[string]any); ok {
			for dep := range deps {
				if at(deps, dep, "condition") != "service_healthy" {
					t.Errorf("service %s waits for %s without service_healthy", name, dep)
				}
			}
		}
	}
	if test, _ := at(services, "postgres", "healthcheck", "test", 1).(string); !strings.Contains(test, "-h 127.0.0.1") {
		t.Errorf("pg_isready without -h reports ready during first-boot init: %q", test)
	}
	if b, err := os.ReadFile(".env.example"); err != nil || regexp.MustCompile(`(?m)^[A-Z_]+=.+$`).Match(b) {
		t.Errorf(".env.example missing or holding a value: %v", err)
	}

	// The stack signs ES256 and publishes its key (docs/security.md, "Token
	// keys"): a secret in the file or in .env would make it sign HS256.
	gw := services["gateway"]
	for _, file := range []string{"docker-compose.yml", ".env.example"} {
		b, _ := os.ReadFile(file)
		for _, v := range []string{"GATEWAY_JWT_SECRET", "GATEWAY_JWT_KEYS"} {
			if bytes.Contains(b, []byte(v)) {
				t.Errorf("%s names %s: the stack would sign HS256, and its JWKS would publish no key", file, v)
			}
		}
	}
	// Hardened as deploy/k8s/gateway.yaml: writable only in its volume.
	if at(gw, "read_only") != true || !slices.Equal(asStrings(at(gw, "cap_drop")), []string{"ALL"}) ||
		!slices.Contains(asStrings(at(gw, "security_opt")), "no-new-privileges:true") {
		t.Error("the gateway is not read_only, with cap_drop [ALL] and no-new-privileges:true")
	}
	// The drain fits the stop: Compose's stop_grace_period (10 s unless
	// set) above the shutdown delay, the drain and the admin listener's 1 s.
	grace := 10 * time.Second
	if g, ok := at(gw, "stop_grace_period").(string); ok {
		var err error
		if grace, err = time.ParseDuration(g); err != nil {
			t.Fatalf("stop_grace_period: %v", err)
		}
	}
	if need := shutdownTime(t, func(v string) string { s, _ := at(gw, "environment", v).(string); return s }); need >= grace {
		t.Errorf("the gateway's shutdown takes up to %v, beyond the stop grace %v: it is killed mid-drain", need, grace)
	}
}

// shutdownTime is the longest a gateway takes from SIGTERM to exit:
// GATEWAY_SHUTDOWN_DELAY + GATEWAY_SHUTDOWN_TIMEOUT (as env gives them,
// else the defaults) + the admin listener's second.
func shutdownTime(t *testing.T, env func(string) string) time.Duration {
	t.Helper()
	d := gatewayconfig.Defaults().Server
	total := time.Second
	for v, def := range map[string]time.Duration{"GATEWAY_SHUTDOWN_DELAY": d.ShutdownDelay, "GATEWAY_SHUTDOWN_TIMEOUT": d.ShutdownTimeout} {
		if s := env(v); s != "" {
			var err error
			if def, err = time.ParseDuration(s); err != nil {
				t.Fatalf("%s: %v", v, err)
			}
		}
		total += def
	}
	return total
}

// TestComposeObservabilityProfile: the profile's Prometheus scrapes the
// gateway's admin port over the Compose network, which no host port
// publishes; it loads alerts.yaml; Grafana is provisioned with that
// Prometheus and the dashboard; every file mounted exists; the two UIs
// listen on the loopback only.
func TestComposeObservabilityProfile(t *testing.T) {
	inRepositoryRoot(t)
	compose := readYAMLDocs(t, "docker-compose.yml")[0]
	services, _ := compose["services"].(map[string]any)
	gw, prom, grafana := services["gateway"], services["prometheus"], services["grafana"]

	_, adminPort, err := net.SplitHostPort(at(gw, "environment", "GATEWAY_ADMIN_ADDR").(string))
	if err != nil {
		t.Fatal(err)
	}
	for name, svc := range services {
		for _, p := range asList(at(svc, "ports")) {
			parts := strings.Split(fmt.Sprint(p), ":")
			if name == "gateway" && parts[len(parts)-1] == adminPort {
				t.Errorf("the gateway's admin port %s is published: %v", adminPort, p)
			}
			if (name == "prometheus" || name == "grafana") && (len(parts) != 3 || parts[0] != "127.0.0.1") {
				t.Errorf("service %s publishes %v beyond the loopback", name, p)
			}
		}
	}

	// mounts maps each container path of a service's bind mounts to the
	// file it mounts, which must exist.
	mounts := func(name string, svc any) map[string]string {
		out := map[string]string{}
		for _, v := range asStrings(at(svc, "volumes")) {
			parts := strings.Split(v, ":")
			if !strings.HasPrefix(parts[0], "./") {
				continue // a named volume
			}
			if _, err := os.Stat(parts[0]); err != nil {
				t.Errorf("service %s mounts %s: %v", name, parts[0], err)
			}
			out[parts[1]] = parts[0]
		}
		return out
	}

	promMounts := mounts("prometheus", prom)
	configPath := ""
	for _, arg := range asStrings(at(prom, "command")) {
		if v, ok := strings.CutPrefix(arg, "--config.file="); ok {
			configPath = v
		}
	}
	configFile := promMounts[configPath]
	if configFile != "./deploy/observability/prometheus.yml" {
		t.Fatalf("Prometheus reads %q, mounted from %q; want deploy/observability/prometheus.yml", configPath, configFile)
	}
	promConfig := readYAMLDocs(t, configFile)[0]
	for _, rules := range asStrings(at(promConfig, "rule_files")) {
		if promMounts[path.Join(path.Dir(configPath), rules)] != "./deploy/observability/alerts.yaml" {
			t.Errorf("Prometheus loads rules %s, which is not deploy/observability/alerts.yaml", rules)
		}
	}
	if len(asStrings(at(promConfig, "rule_files"))) == 0 {
		t.Error("Prometheus loads no rules")
	}
	job := at(promConfig, "scrape_configs", 0)
	sd := at(job, "dns_sd_configs", 0)
	if !slices.Contains(asStrings(at(sd, "names")), "gateway") || strconv.Itoa(at(sd, "port").(int)) != adminPort {
		t.Errorf("Prometheus scrapes %v port %v, want the gateway service's admin port %s", at(sd, "names"), at(sd, "port"), adminPort)
	}
	rules, err := os.ReadFile("deploy/observability/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if name := at(job, "job_name"); !bytes.Contains(rules, []byte(fmt.Sprintf(`job="%s"`, name))) {
		t.Errorf("Prometheus's job %v is not the job the rules select", name)
	}

	grafanaMounts := mounts("grafana", grafana)
	var datasources, providers string
	for target, file := range grafanaMounts {
		switch {
		case strings.HasPrefix(target, "/etc/grafana/provisioning/datasources/"):
			datasources = file
		case strings.HasPrefix(target, "/etc/grafana/provisioning/dashboards/"):
			providers = file
		}
	}
	if datasources == "" || providers == "" {
		t.Fatalf("Grafana is not provisioned with a datasource and dashboards: %v", grafanaMounts)
	}
	ds := at(readYAMLDocs(t, datasources)[0], "datasources", 0)
	if at(ds, "type") != "prometheus" || at(ds, "url") != "http://prometheus:9090" {
		t.Errorf("Grafana's datasource %v is not the profile's Prometheus", ds)
	}
	dir := at(readYAMLDocs(t, providers)[0], "providers", 0, "options", "path").(string)
	found := false
	for target, file := range grafanaMounts {
		if path.Dir(target) == dir && file == "./deploy/observability/dashboard.json" {
			found = true
		}
	}
	if !found {
		t.Errorf("no dashboard.json mounted in %s, where Grafana's provider reads dashboards", dir)
	}
	if home, _ := at(grafana, "environment", "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH").(string); grafanaMounts[home] != "./deploy/observability/dashboard.json" {
		t.Errorf("Grafana's home dashboard %q is not the mounted dashboard.json", home)
	}
	if at(grafana, "depends_on", "prometheus", "condition") != "service_healthy" {
		t.Error("Grafana does not wait for Prometheus")
	}
}

func TestDockerfile(t *testing.T) {
	inRepositoryRoot(t)
	b, err := os.ReadFile("deploy/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	file := string(b)
	if !regexp.MustCompile(`(?m)^USER [0-9]+:[0-9]+$`).MatchString(file) {
		t.Error("the image's USER is not numeric: runAsNonRoot pods refuse a named user")
	}
	if !strings.Contains(file, `HEALTHCHECK`) || !strings.Contains(file, `"healthcheck"`) {
		t.Error("no HEALTHCHECK through the gateway's own healthcheck command")
	}
	if !regexp.MustCompile(`(?m)^EXPOSE 8080`).MatchString(file) {
		t.Error("EXPOSE does not name the public port")
	}
	if ignore, err := os.ReadFile(".dockerignore"); err != nil || !bytes.Contains(ignore, []byte(".git")) || !bytes.Contains(ignore, []byte("data/")) {
		t.Errorf(".dockerignore missing .git or data/: %v", err)
	}
}

// TestTheBinaryLinksNoGRPC keeps gRPC out of the gateway's binary: with
// it the binary was 41.2 MB and the image over its 40 MB bound (docs/
// operating.md, "The image's size"). compose/check.sh measures the image.
func TestTheBinaryLinksNoGRPC(t *testing.T) {
	inRepositoryRoot(t)
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "google.golang.org/grpc") || strings.HasPrefix(pkg, "github.com/grpc-ecosystem/") {
			t.Errorf("the gateway links %s", pkg)
		}
	}
}

func TestKubernetesManifest(t *testing.T) {
	inRepositoryRoot(t)
	known := knownVariables()
	kinds := map[string]map[string]any{}
	for _, doc := range readYAMLDocs(t, "deploy/k8s/gateway.yaml") {
		kinds[doc["kind"].(string)] = doc
	}
	for _, kind := range []string{"ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler"} {
		if kinds[kind] == nil {
			t.Errorf("no %s", kind)
		}
	}
	config, _ := at(kinds["ConfigMap"], "data").(map[string]any)
	for v := range config {
		if !known[v] {
			t.Errorf("ConfigMap sets %s, which the gateway does not read", v)
		}
	}
	if p := config["GATEWAY_TRUSTED_PROXIES"]; p == "10.0.0.0/8" {
		t.Error("GATEWAY_TRUSTED_PROXIES trusts the whole 10/8: narrow it to the ingress")
	}
	pod := at(kinds["Deployment"], "spec", "template", "spec")
	c := at(pod, "containers", 0)
	if image, _ := at(c, "image").(string); !pinnedImage.MatchString(image) {
		t.Errorf("image %q is not a versioned reference", image)
	}
	for _, sc := range []any{at(pod, "securityContext"), at(c, "securityContext")} {
		if _, ok := at(sc, "runAsUser").(int); !ok {
			t.Errorf("securityContext %v: runAsUser is not numeric", sc)
		}
	}
	if at(pod, "securityContext", "seccompProfile", "type") != "RuntimeDefault" {
		t.Error("no RuntimeDefault seccomp profile")
	}
	if at(c, "securityContext", "readOnlyRootFilesystem") != true || !slices.Contains(asStrings(at(c, "securityContext", "capabilities", "drop")), "ALL") {
		t.Error("the container may write its root filesystem or keeps capabilities")
	}
	env := map[string]string{}
	for _, e := range asList(at(c, "env")) {
		env[at(e, "name").(string)] = at(e, "value").(string)
	}
	if env["GOMEMLIMIT"] == "" {
		t.Error("no GOMEMLIMIT below the memory limit")
	}
	for v := range env {
		if strings.HasPrefix(v, "GATEWAY_") && !known[v] {
			t.Errorf("Deployment sets %s, which the gateway does not read", v)
		}
	}
	delay, _ := strconv.Atoi(strings.TrimSuffix(config["GATEWAY_SHUTDOWN_DELAY"].(string), "s"))
	preStop, _ := at(c, "lifecycle", "preStop", "sleep", "seconds").(int)
	if preStop != delay {
		t.Errorf("preStop sleep %v does not match GATEWAY_SHUTDOWN_DELAY %ds", preStop, delay)
	}
	// The kubelet's grace covers the preStop sleep and the whole shutdown.
	need := time.Duration(preStop)*time.Second + shutdownTime(t, func(v string) string { s, _ := config[v].(string); return s })
	if grace, _ := at(pod, "terminationGracePeriodSeconds").(int); time.Duration(grace)*time.Second <= need {
		t.Errorf("terminationGracePeriodSeconds %d does not cover the preStop sleep and the shutdown (%v)", grace, need)
	}

	// Ports against the defaults; the probe paths and the image's
	// HEALTHCHECK against a running gateway are e2e's
	// TestEndToEndKubernetesProbes.
	ports := map[string]int{}
	for _, p := range asList(at(c, "ports")) {
		ports[at(p, "name").(string)] = at(p, "containerPort").(int)
	}
	_, publicPort, _ := net.SplitHostPort(gatewayconfig.Defaults().Server.Addr)
	_, adminPort, _ := net.SplitHostPort(config["GATEWAY_ADMIN_ADDR"].(string))
	if strconv.Itoa(ports["http"]) != publicPort || strconv.Itoa(ports["admin"]) != adminPort {
		t.Errorf("container ports %v, want http %s and admin %s", ports, publicPort, adminPort)
	}
	for _, probe := range []string{"startupProbe", "readinessProbe", "livenessProbe"} {
		if at(c, probe, "httpGet", "port") != "admin" {
			t.Errorf("%s is not on the admin port", probe)
		}
	}
}

func asList(v any) []any { l, _ := v.([]any); return l }

func asStrings(v any) []string {
	var out []string
	for _, x := range asList(v) {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
