package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// tokenCases are -tokens' gateways: the hot hit in the production shape
// (Redis configured, the default local tier), the same binary and store,
// each reading with a token of its own algorithm. The verified token is
// remembered, so the signature is checked once per token; the ratio is the
// target of issue 33 (EdDSA ≥ 0.98× HS256).
var tokenCases = []struct{ name, alg string }{
	{"gateway-local", "HS256"},
	{"gateway-local-eddsa", "EdDSA"},
	{"gateway-local-es256", "ES256"},
}

// startTokens starts one gateway per algorithm, each with a data
// directory of its own (its generated key), and logs in on each.
func (l *lab) startTokens(ctx context.Context) error {
	for _, c := range tokenCases {
		var extra []string
		if c.alg != "HS256" {
			dir := filepath.Join(l.work, c.name)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			extra = []string{"GATEWAY_JWT_ALGORITHM=" + c.alg, "GATEWAY_DATA_DIR=" + dir}
		}
		s, err := l.startGateway(ctx, c.name, false, "", extra...)
		if err != nil {
			return err
		}
		tok, err := l.loginAt(s.addr)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		s.auth, s.headers = false, []string{"Authorization: Bearer " + tok}
	}
	return nil
}

// tokensBench runs tokenCases interleaved, -reps times, and reports each
// repetition's ratio against HS256.
func (l *lab) tokensBench(ctx context.Context, w *strings.Builder) error {
	var names []string
	for _, c := range tokenCases {
		names = append(names, c.name)
	}
	if err := l.warmUp(ctx, names, false); err != nil {
		return err
	}
	res, err := l.rounds(ctx, l.opts.reps, false, names)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n## Hot hit by token algorithm: wrk -t2 -c%d -d%v, %d interleaved repetitions, medians\n\n", l.opts.conns, l.opts.duration, l.opts.reps)
	table(w, res, names)
	base := median(res[names[0]])
	for _, c := range tokenCases[1:] {
		r := median(res[c.name])
		fmt.Fprintf(w, "\n%s / HS256: **%.3f×** requests/s, %.3f× CPU per request; each repetition:", c.alg, r.rps/base.rps,
			float64(r.cpuPerRequest)/float64(base.cpuPerRequest))
		for i := range min(len(res[c.name]), len(res[names[0]])) {
			fmt.Fprintf(w, " %.3f", res[c.name][i].rps/res[names[0]][i].rps)
		}
	}
	w.WriteString("\n")
	return nil
}
