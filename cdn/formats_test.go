package cdn_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/cdn"
	"github.com/realty-gateway/gateway/internal/settings"
	"github.com/realty-gateway/gateway/internal/testenv"
)

func TestPurgeFormats(t *testing.T) {
	tests := []struct {
		name   string
		format string
		path   string // appended to the fake's URL
		soft   bool
		hard   bool
		want   []string
	}{
		{name: "template", format: cdn.FormatTemplate, path: "/purge/{key}", hard: true,
			want: []string{"POST /purge/realty-1 realty-1 Auth=tok", "POST /purge/firm-1 firm-1 Auth=tok"}},
		{name: "varnish-xkey hard", format: cdn.FormatVarnishXkey, hard: true,
			want: []string{"PURGE /  Auth=tok Xkey-Purge=realty-1 firm-1"}},
		{name: "varnish-xkey soft", format: cdn.FormatVarnishXkey, soft: true,
			want: []string{"PURGE /  Auth=tok Xkey-Softpurge=realty-1 firm-1"}},
		{name: "varnish-xkey: a visibility change is hard even when soft is configured", format: cdn.FormatVarnishXkey, soft: true, hard: true,
			want: []string{"PURGE /  Auth=tok Xkey-Purge=realty-1 firm-1"}},
		{name: "fastly soft", format: cdn.FormatFastly, path: "/service/abc", soft: true,
			want: []string{"POST /service/abc/purge/realty-1  Auth=tok Fastly-Soft-Purge=1", "POST /service/abc/purge/firm-1  Auth=tok Fastly-Soft-Purge=1"}},
		{name: "fastly hard", format: cdn.FormatFastly, path: "/service/abc", hard: true,
			want: []string{"POST /service/abc/purge/realty-1  Auth=tok", "POST /service/abc/purge/firm-1  Auth=tok"}},
		{name: "cloudflare: one request with every tag", format: cdn.FormatCloudflare, path: "/zones/z/purge_cache", hard: true,
			want: []string{`POST /zones/z/purge_cache {"tags":["realty-1","firm-1"]} Auth=tok Content-Type=application/json`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := newFakeCDN(t, "Auth", "Xkey-Purge", "Xkey-Softpurge", "Fastly-Soft-Purge", "Content-Type")
			p := newPurger(t, cdn.Config{URL: settings.DSN(fake.srv.URL + tt.path), Header: "Auth: tok", Format: tt.format,
				Soft: tt.soft, Timeout: time.Second, RepurgeAfter: time.Hour}, cdn.Deps{GiveUpAfter: time.Minute, Queue: 10, Log: quiet()})
			run(t, p)
			p.Purge(context.Background(), tt.hard, "realty-1", "firm-1")
			testenv.WaitFor(t, func() bool { return len(fake.requests()) >= len(tt.want) })
			got := fake.requests()
			for i := range got {
				got[i] = stripContentType(got[i], tt.format)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("requests\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

// stripContentType drops the text/plain Content-Type of template purges,
// which the table does not spell out.
func stripContentType(line, format string) string {
	if format != cdn.FormatTemplate {
		return line
	}
	const ct = " Content-Type=text/plain"
	if i := len(line) - len(ct); i > 0 && line[i:] == ct {
		return line[:i]
	}
	return line
}
