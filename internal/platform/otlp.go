package platform

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/realty-gateway/gateway/internal/config"
)

// otlpClient posts spans to an OTLP/HTTP collector as protobuf. It is the
// transport under the SDK's otlptrace exporter, which turns spans into
// protobuf and calls UploadTraces. It stands in for otlptracehttp, whose
// configuration package imports gRPC: a third of the binary (see
// docs/operating.md, "Traces"). Safe for concurrent use.
type otlpClient struct {
	export config.OTLPExport
	http   *http.Client
	// firstWait is the wait before the first retry, doubled after each.
	firstWait time.Duration
}

func newOTLPClient(e config.OTLPExport) (*otlpClient, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if e.CAFile != "" || e.CertFile != "" {
		tc, err := otlpTLS(e)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = tc
	}
	return &otlpClient{export: e, http: &http.Client{Transport: tr}, firstWait: time.Second}, nil
}

func otlpTLS(e config.OTLPExport) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if e.CAFile != "" {
		pem, err := os.ReadFile(e.CAFile)
		if err != nil {
			return nil, fmt.Errorf("OTLP certificate: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("OTLP certificate %s: no PEM certificate", e.CAFile)
		}
	}
	if e.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(e.CertFile, e.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("OTLP client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func (c *otlpClient) Start(context.Context) error { return nil }

func (c *otlpClient) Stop(context.Context) error {
	c.http.CloseIdleConnections()
	return nil
}

// UploadTraces sends one batch. TracesData is wire-compatible with the
// collector's ExportTraceServiceRequest. It retries what the OTLP
// specification calls retryable (429, 502, 503, 504, and a failed
// connection but for a certificate refused), after Retry-After or a
// doubling wait, while one more try fits within the timeout.
func (c *otlpClient) UploadTraces(ctx context.Context, spans []*tracepb.ResourceSpans) error {
	body, err := proto.Marshal(&tracepb.TracesData{ResourceSpans: spans})
	if err != nil {
		return fmt.Errorf("OTLP encode: %w", err)
	}
	if c.export.Gzip {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, _ = zw.Write(body) // a bytes.Buffer does not fail
		_ = zw.Close()
		body = b.Bytes()
	}
	ctx, cancel := context.WithTimeout(ctx, c.export.Timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	backoff := c.firstWait
	for {
		retryAfter, err := c.post(ctx, body)
		if err == nil || retryAfter < 0 {
			return err
		}
		wait := backoff
		if retryAfter > 0 {
			wait = retryAfter
		} else {
			backoff *= 2
		}
		if wait >= time.Until(deadline) { // no try would fit
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// retryable reports whether the OTLP specification retries after status.
func retryable(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// post sends body once. retryAfter is negative when err is final, zero
// for a retry after the client's own wait, positive as the collector asks.
func (c *otlpClient) post(ctx context.Context, body []byte) (retryAfter time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.export.URL, bytes.NewReader(body))
	if err != nil {
		return -1, fmt.Errorf("OTLP request: %w", err)
	}
	for k, v := range c.export.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("User-Agent", "realty-gateway OTLP/HTTP exporter")
	if c.export.Gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var unverified *tls.CertificateVerificationError
		if ctx.Err() != nil || errors.As(err, &unverified) { // a retry would fail alike
			return -1, fmt.Errorf("OTLP export: %w", err)
		}
		return 0, fmt.Errorf("OTLP export: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	switch {
	case resp.StatusCode/100 == 2:
		return 0, nil
	case retryable(resp.StatusCode):
		err := fmt.Errorf("OTLP export: collector answered %s", resp.Status)
		if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 {
			return time.Duration(s) * time.Second, err
		}
		return 0, err
	default:
		return -1, errors.New("OTLP export: collector answered " + resp.Status)
	}
}
