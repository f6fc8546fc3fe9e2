package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/realty-gateway/gateway/internal/settings"
)

// configFileHeader opens configs/gateway.yaml.
const configFileHeader = `# Configuration of the realty gateway. Every value here is the built-in
# default; GATEWAY_<NAME> environment variables override them, as named on
# each line. GATEWAY_CONFIG names another file. Durations use Go syntax:
# 90s, 5m, 1h. Generated from the components' Config types:
# GATEWAY_UPDATE_CONFIG=1 go test -run TestConfigFile . rewrites it.
`

// writeConfigFile writes cfg as configs/gateway.yaml is written: one group
// per component, each setting with its variable and meaning.
func writeConfigFile(w io.Writer, cfg config) error {
	var b strings.Builder
	b.WriteString(configFileHeader)
	var open []string // the group levels written so far
	for _, s := range settings.Walk(cfg, envPrefix) {
		levels := strings.Split(s.Path, ".")
		groups, key := levels[:len(levels)-1], levels[len(levels)-1]
		n := 0
		for n < len(open) && n < len(groups) && open[n] == groups[n] {
			n++
		}
		if n == 0 {
			b.WriteString("\n")
		}
		for i := n; i < len(groups); i++ {
			fmt.Fprintf(&b, "%s%s:\n", indent(i), groups[i])
		}
		open = groups
		line := indent(len(groups)) + key + ": " + yamlValue(s.Value)
		fmt.Fprintf(&b, "%-38s # %s: %s\n", line, s.Env, s.Help)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func indent(level int) string { return strings.Repeat("  ", level) }

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

// writeHelp lists the subcommands and every setting's variable, default
// and meaning.
func writeHelp(w io.Writer) error {
	var b strings.Builder
	b.WriteString(usage + "\n\nSettings (configs/gateway.yaml, or GATEWAY_CONFIG; the environment wins):\n")
	for _, s := range settings.Walk(defaults(), envPrefix) {
		fmt.Fprintf(&b, "  %-36s %s (default %s)\n", s.Env, s.Help, yamlValue(s.Value))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
