package config

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/realty-gateway/gateway/internal/settings"
)

// WriteHelp writes usage, then every setting's variable, default and
// meaning.
func WriteHelp(w io.Writer, usage string) error {
	var b strings.Builder
	b.WriteString(usage + "\n\nSettings (configs/gateway.yaml, or GATEWAY_CONFIG; the environment wins):\n")
	for _, s := range settings.Walk(Defaults(), EnvPrefix) {
		fmt.Fprintf(&b, "  %-36s %s (default %s)\n", s.Env, s.Help, yamlValue(s.Value))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// yamlValue writes a default as YAML: durations in their shortest Go form.
func yamlValue(v any) string {
	switch v := v.(type) {
	case time.Duration:
		return shortDuration(v)
	case []string:
		if len(v) == 0 {
			return "[]"
		}
		return "[" + strings.Join(v, ", ") + "]"
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	default:
		out, _ := yaml.Marshal(v) // scalars always marshal
		return strings.TrimSpace(string(out))
	}
}

// shortDuration is d.String() without zero trailing units: 1h, 5m, 1m30s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
