package cdn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Formats of purge requests.
const (
	// FormatTemplate POSTs each key to URL, "{key}" replaced by the key.
	FormatTemplate = "template"
	// FormatVarnishXkey sends PURGE to URL with "xkey-purge: <keys>", or
	// "xkey-softpurge" for a soft purge (the xkey vmod).
	FormatVarnishXkey = "varnish-xkey"
	// FormatFastly POSTs URL/purge/<key>, with "Fastly-Soft-Purge: 1" for
	// a soft purge.
	FormatFastly = "fastly"
	// FormatCloudflare POSTs {"tags":[…]} to URL: every key of a purge in
	// one request. Cloudflare has no soft tag purge: all are hard.
	FormatCloudflare = "cloudflare"
)

// send makes the purge requests of j in the configured format.
func (p *Purger) send(ctx context.Context, j *job) error {
	base := string(p.cfg.URL)
	switch p.cfg.Format {
	case FormatVarnishXkey:
		header := "xkey-softpurge"
		if j.hard {
			header = "xkey-purge"
		}
		return p.do(ctx, "PURGE", base, nil, header, strings.Join(j.keys, " "))
	case FormatCloudflare:
		body, err := json.Marshal(map[string][]string{"tags": j.keys})
		if err != nil {
			return err
		}
		return p.do(ctx, http.MethodPost, base, body, "Content-Type", "application/json")
	case FormatFastly:
		for _, k := range j.keys {
			name, value := "", ""
			if !j.hard {
				name, value = "Fastly-Soft-Purge", "1"
			}
			if err := p.do(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+"/purge/"+url.PathEscape(k), nil, name, value); err != nil {
				return err
			}
		}
		return nil
	default:
		for _, k := range j.keys {
			target := strings.ReplaceAll(base, "{key}", url.PathEscape(k))
			if err := p.do(ctx, http.MethodPost, target, []byte(k), "Content-Type", "text/plain"); err != nil {
				return err
			}
		}
		return nil
	}
}

// do makes one request with the auth header and one more, and wants 2xx.
func (p *Purger) do(ctx context.Context, method, target string, body []byte, name, value string) error {
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if name != "" {
		req.Header.Set(name, value)
	}
	if n, v, ok := strings.Cut(string(p.cfg.Header), ":"); ok {
		req.Header.Set(strings.TrimSpace(n), strings.TrimSpace(v))
	}
	resp, err := p.client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			return fmt.Errorf("purge %s: %w", method, uerr.Err) // the URL may hold a token
		}
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("purge %s: status %d", method, resp.StatusCode)
	}
	return nil
}
