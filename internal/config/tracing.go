package config

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/realty-gateway/gateway/internal/settings"
)

// Tracing turns OpenTelemetry tracing on. Everything else about it is set
// with the standard OTEL_* variables, which the SDK reads itself:
// OTEL_TRACES_SAMPLER(_ARG), OTEL_BSP_*, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_EXPORTER_OTLP_(TRACES_)HEADERS and the rest.
type Tracing struct {
	OTLPEndpoint settings.DSN `yaml:"otlpEndpoint" env:"OTLP_ENDPOINT" help:"OTLP/HTTP collector, such as http://collector:4318; empty: tracing is on only if OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set"`

	// standard says whether a standard OTEL_EXPORTER_OTLP_* endpoint is
	// set; disabled, whether OTEL_SDK_DISABLED=true. Load sets both.
	standard, disabled bool
}

// On reports whether spans are recorded and exported.
func (c Tracing) On() bool { return !c.disabled && (c.OTLPEndpoint != "" || c.standard) }

func (c Tracing) validate() error {
	if c.OTLPEndpoint == "" {
		return nil
	}
	u, err := url.Parse(string(c.OTLPEndpoint))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("tracing.otlpEndpoint must be an http:// or https:// URL")
	}
	if u.User != nil {
		return fmt.Errorf("tracing.otlpEndpoint must not carry credentials: put them in OTEL_EXPORTER_OTLP_HEADERS")
	}
	return nil
}

// fromEnviron reads the standard variables that decide whether tracing is on.
func (c *Tracing) fromEnviron(environ map[string]string) {
	c.standard = environ["OTEL_EXPORTER_OTLP_ENDPOINT"] != "" || environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] != ""
	c.disabled = strings.EqualFold(environ["OTEL_SDK_DISABLED"], "true")
}
