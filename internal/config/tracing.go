package config

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/realty-gateway/gateway/internal/settings"
)

// Tracing turns OpenTelemetry tracing on, and says where spans go. The SDK
// reads the sampler's and the batcher's standard variables itself
// (OTEL_TRACES_SAMPLER(_ARG), OTEL_BSP_*, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES); Load reads the exporter's (OTLPExport).
type Tracing struct {
	OTLPEndpoint settings.DSN `yaml:"otlpEndpoint" env:"OTLP_ENDPOINT" help:"OTLP/HTTP collector, such as http://collector:4318; empty: tracing is on only if OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set"`

	// export is what fromEnviron read from OTEL_EXPORTER_OTLP_*;
	// disabled, whether OTEL_SDK_DISABLED=true.
	export   OTLPExport
	disabled bool
}

// OTLPExport is where and how spans are sent: OTLP over HTTP, as protobuf.
// Its headers may hold a collector's credentials: it has no LogValue, and
// nothing logs it.
type OTLPExport struct {
	URL                       string            // the traces URL, ending in /v1/traces for a base URL
	Headers                   map[string]string // OTEL_EXPORTER_OTLP_(TRACES_)HEADERS
	Timeout                   time.Duration     // per export, retries included; OTEL_EXPORTER_OTLP_(TRACES_)TIMEOUT
	Gzip                      bool              // OTEL_EXPORTER_OTLP_(TRACES_)COMPRESSION=gzip
	CAFile, CertFile, KeyFile string            // OTEL_EXPORTER_OTLP_(TRACES_)CERTIFICATE, CLIENT_CERTIFICATE, CLIENT_KEY
}

// On reports whether spans are recorded and exported.
func (c Tracing) On() bool { return !c.disabled && c.Export().URL != "" }

// Export says where spans go: GATEWAY_OTLP_ENDPOINT first, then
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, then
// OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces added.
func (c Tracing) Export() OTLPExport {
	e := c.export
	if e.Timeout == 0 {
		e.Timeout = 10 * time.Second
	}
	if c.OTLPEndpoint != "" {
		e.URL = tracesURL(string(c.OTLPEndpoint))
	}
	return e
}

func (c Tracing) validate() error {
	u := c.Export().URL
	if u == "" || c.disabled {
		return nil
	}
	parsed, err := url.Parse(u)
	if err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" {
		return fmt.Errorf("tracing.otlpEndpoint must be an http:// or https:// URL")
	}
	if parsed.User != nil {
		return fmt.Errorf("tracing.otlpEndpoint must not carry credentials: put them in OTEL_EXPORTER_OTLP_HEADERS")
	}
	return nil
}

// fromEnviron reads the standard OTEL_EXPORTER_OTLP_* variables, a
// traces-only variable over the general one, and OTEL_SDK_DISABLED. Its
// errors name a variable, never its value.
func (c *Tracing) fromEnviron(environ map[string]string) error {
	c.disabled = strings.EqualFold(environ["OTEL_SDK_DISABLED"], "true")
	if c.disabled { // tracing is off: its settings are not read
		return nil
	}
	get := func(name string) (string, string) {
		if v := environ["OTEL_EXPORTER_OTLP_TRACES_"+name]; v != "" {
			return "OTEL_EXPORTER_OTLP_TRACES_" + name, v
		}
		return "OTEL_EXPORTER_OTLP_" + name, environ["OTEL_EXPORTER_OTLP_"+name]
	}
	var e OTLPExport
	if v := environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]; v != "" {
		e.URL = v
	} else if v := environ["OTEL_EXPORTER_OTLP_ENDPOINT"]; v != "" {
		e.URL = tracesURL(v)
	}
	var errs []error
	if name, v := get("HEADERS"); v != "" {
		h, err := parseHeaders(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		e.Headers = h
	}
	if name, v := get("TIMEOUT"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			errs = append(errs, fmt.Errorf("%s must be a positive number of milliseconds", name))
		}
		e.Timeout = time.Duration(ms) * time.Millisecond
	}
	switch name, v := get("COMPRESSION"); strings.ToLower(v) {
	case "", "none":
	case "gzip":
		e.Gzip = true
	default:
		errs = append(errs, fmt.Errorf("%s must be gzip or none", name))
	}
	_, e.CAFile = get("CERTIFICATE")
	_, e.CertFile = get("CLIENT_CERTIFICATE")
	_, e.KeyFile = get("CLIENT_KEY")
	if (e.CertFile == "") != (e.KeyFile == "") {
		errs = append(errs, errors.New("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY go together"))
	}
	c.export = e
	return errors.Join(errs...)
}

// parseHeaders reads key=value pairs separated by commas, each side
// percent-decoded, as the OpenTelemetry specification gives them; an
// empty pair is skipped.
func parseHeaders(s string) (map[string]string, error) {
	h := map[string]string{}
	for i, pair := range strings.Split(s, ",") {
		if strings.TrimSpace(pair) == "" {
			continue // a trailing comma, as the SDK reads it
		}
		k, v, ok := strings.Cut(pair, "=")
		key, kerr := url.PathUnescape(strings.TrimSpace(k))
		value, verr := url.PathUnescape(strings.TrimSpace(v))
		if !ok || key == "" || kerr != nil || verr != nil {
			return nil, fmt.Errorf("pair %d is not key=value, percent-encoded", i+1)
		}
		h[key] = value
	}
	return h, nil
}

// tracesURL adds the signal's path to a collector's base URL, as the
// OpenTelemetry specification does with OTEL_EXPORTER_OTLP_ENDPOINT.
func tracesURL(base string) string {
	u, err := url.Parse(base)
	if err != nil || strings.HasSuffix(u.Path, "/v1/traces") {
		return base
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	return u.String()
}
