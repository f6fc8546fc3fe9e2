package e2e

import (
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// manifestProbes reads the probe paths of the Deployment's first container
// in a Kubernetes manifest, by probe name.
func manifestProbes(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type probe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
		} `yaml:"httpGet"`
	}
	dec := yaml.NewDecoder(f)
	for {
		var doc struct {
			Kind string `yaml:"kind"`
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							StartupProbe   probe `yaml:"startupProbe"`
							ReadinessProbe probe `yaml:"readinessProbe"`
							LivenessProbe  probe `yaml:"livenessProbe"`
						} `yaml:"containers"`
					} `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		}
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			t.Fatalf("%s: no Deployment with a container", path)
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if cs := doc.Spec.Template.Spec.Containers; doc.Kind == "Deployment" && len(cs) > 0 {
			return map[string]string{"startupProbe": cs[0].StartupProbe.HTTPGet.Path,
				"readinessProbe": cs[0].ReadinessProbe.HTTPGet.Path, "livenessProbe": cs[0].LivenessProbe.HTTPGet.Path}
		}
	}
}

// TestEndToEndKubernetesProbes: the image's HEALTHCHECK (the binary asks
// its own admin listener) and the manifest's probe paths, against a
// running gateway. The manifest's static checks are the root package's
// TestKubernetesManifest.
func TestEndToEndKubernetesProbes(t *testing.T) {
	probes := manifestProbes(t, "../deploy/k8s/gateway.yaml")
	e := environment{"GATEWAY_DATA_DIR": t.TempDir()}
	p := start(t, e)
	e["GATEWAY_ADMIN_ADDR"] = strings.TrimPrefix(p.AdminBase, "http://")
	if code, out := gatewayCmd(t, e, "", "healthcheck"); code != 0 {
		t.Errorf("healthcheck against a live gateway exited %d: %s", code, out)
	}
	e["GATEWAY_ADMIN_ADDR"] = "127.0.0.1:1"
	if code, _ := gatewayCmd(t, e, "", "healthcheck"); code != 1 {
		t.Errorf("healthcheck against nothing exited %d, want 1", code)
	}
	for _, probe := range []string{"startupProbe", "readinessProbe", "livenessProbe"} {
		if code := p.adminStatus(t, probes[probe]); code != http.StatusNoContent {
			t.Errorf("%s %s: the gateway answers %d", probe, probes[probe], code)
		}
	}
}
