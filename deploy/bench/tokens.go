package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/golang-jwt/jwt/v5"

	"github.com/realty-gateway/gateway/signing"
)

// tokenCase is one of -tokens' cases: a gateway signing with alg, in one
// of two shapes, read with a token of its own login.
type tokenCase struct {
	name string
	alg  string
	// embedded: SQLite and no Redis (the embedded store's file of the run,
	// shared by the embedded cases); else PostgreSQL and Redis configured
	// with the default local tier, the production shape.
	embedded bool
	// shortKid: the key file is named e1.pem, so the token's kid is "e1"
	// instead of the key's RFC 7638 thumbprint (43 characters).
	shortKid bool
	// padOf: no gateway of its own; the HS256 case named here is read with
	// its token padded (an unchecked claim) to the length of the EdDSA
	// token of the same shape, and re-signed with the secret.
	padOf string
}

// tokenCases are -tokens' cases, both shapes interleaved in one run. The
// verified token is remembered, so the signature is checked once per
// token; the ratios are issue 33's and issue 40's target (EdDSA ≥ 0.98×
// HS256). The padded HS256 token and the EdDSA key with a two-character
// kid are the A/B of the token's size: same algorithm, other length.
var tokenCases = []tokenCase{
	{name: "redis-hs256", alg: "HS256"},
	{name: "redis-eddsa", alg: "EdDSA"},
	{name: "redis-es256", alg: "ES256"},
	{name: "redis-hs256-padded", alg: "HS256", padOf: "redis-hs256"},
	{name: "embedded-hs256", alg: "HS256", embedded: true},
	{name: "embedded-eddsa", alg: "EdDSA", embedded: true},
	{name: "embedded-es256", alg: "ES256", embedded: true},
	{name: "embedded-hs256-padded", alg: "HS256", embedded: true, padOf: "embedded-hs256"},
	{name: "embedded-eddsa-kid-e1", alg: "EdDSA", embedded: true, shortKid: true},
}

// chosenTokenCases are the cases -tokens-cases names (all where empty), with
// the cases a padded one needs: its HS256 gateway and the EdDSA one whose
// length it takes.
func (l *lab) chosenTokenCases() ([]tokenCase, error) {
	if l.opts.tokenCases == "" {
		return tokenCases, nil
	}
	want := map[string]bool{}
	for _, n := range strings.Split(l.opts.tokenCases, ",") {
		want[strings.TrimSpace(n)] = true
	}
	var out []tokenCase
	for _, c := range tokenCases {
		if c.padOf != "" && want[c.name] {
			want[c.padOf], want[strings.Replace(c.padOf, "hs256", "eddsa", 1)] = true, true
		}
	}
	for _, c := range tokenCases {
		if want[c.name] {
			out = append(out, c)
			delete(want, c.name)
		}
	}
	if len(want) > 0 {
		return nil, fmt.Errorf("-tokens-cases: unknown %v", slices.Sorted(maps.Keys(want)))
	}
	return out, nil
}

// startTokens starts one gateway per case (but the padded ones), each
// asymmetric one with a data directory of its own (its generated key),
// and logs in on each.
func (l *lab) startTokens(ctx context.Context) error {
	cases, err := l.chosenTokenCases()
	if err != nil {
		return err
	}
	for _, c := range cases {
		if c.padOf != "" {
			continue
		}
		var extra []string
		if c.embedded {
			extra = []string{"GATEWAY_STORE_URL=sqlite:" + filepath.Join(l.work, "embedded.db"), "GATEWAY_REDIS_URL="}
		}
		if c.alg != "HS256" {
			dir := filepath.Join(l.work, c.name)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			if c.shortKid {
				if err := shortKidKey(filepath.Join(dir, "signing-keys"), c.alg, "e1"); err != nil {
					return err
				}
			}
			extra = append(extra, "GATEWAY_JWT_ALGORITHM="+c.alg, "GATEWAY_DATA_DIR="+dir)
		}
		s, err := l.startGateway(ctx, c.name, false, "", extra...)
		if err != nil {
			return err
		}
		key := l.apiKey
		if c.embedded {
			key = l.embeddedAPIKey
		}
		tok, err := l.loginWith(s.addr, key)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		s.auth, s.headers = false, []string{"Authorization: Bearer " + tok}
	}
	for _, c := range cases {
		if c.padOf == "" {
			continue
		}
		of := l.servers[c.padOf]
		eddsa := l.servers[strings.Replace(c.padOf, "hs256", "eddsa", 1)]
		padded, err := padToken(bearerOf(of), len(bearerOf(eddsa)))
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		s := *of
		s.name, s.headers = c.name, []string{"Authorization: Bearer " + padded}
		l.servers[c.name] = &s
	}
	return nil
}

func bearerOf(s *server) string { return strings.TrimPrefix(s.headers[0], "Authorization: Bearer ") }

// shortKidKey generates a key of alg in dir under the file name kid.pem:
// the file's name is the key's kid.
func shortKidKey(dir, alg, kid string) error {
	k, err := signing.GenerateKeyFile(dir, alg)
	if err != nil {
		return err
	}
	return os.Rename(k.File, filepath.Join(dir, kid+".pem"))
}

// padToken adds a claim "pad" to an HS256 token of the bench's secret, so
// that it is n characters long, and signs it again with the secret: the
// gateway ignores the claim, so the token differs from tok only in size.
func padToken(tok string, n int) (string, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "", fmt.Errorf("not a JWS: %q", tok)
	}
	var head map[string]any
	if err := decodeSegment(parts[0], &head); err != nil {
		return "", err
	}
	var claims jwt.MapClaims
	if err := decodeSegment(parts[1], &claims); err != nil {
		return "", err
	}
	for pad := 0; pad < n; pad++ {
		claims["pad"] = strings.Repeat("x", pad)
		t := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
		t.Header["kid"] = head["kid"]
		s, err := t.SignedString([]byte(jwtSecret))
		if err != nil {
			return "", err
		}
		if len(s) >= n {
			return s, nil
		}
	}
	return "", fmt.Errorf("cannot pad a %d-character token to %d", len(tok), n)
}

func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// tokensBench runs tokenCases interleaved, -reps times, and reports each
// repetition's ratio against HS256 of the same shape.
func (l *lab) tokensBench(ctx context.Context, w *strings.Builder) error {
	cases, err := l.chosenTokenCases()
	if err != nil {
		return err
	}
	var names []string
	for _, c := range cases {
		names = append(names, c.name)
	}
	if err := l.warmUp(ctx, names, false); err != nil {
		return err
	}
	// Every other repetition runs the cases in the reverse order (ABBA),
	// so that with an even -reps each case runs as often early as late in
	// a repetition, and a load on the shared machine that rises or falls
	// through a pair of repetitions weighs on every case alike; a case and
	// the HS256 case of its shape stay next to each other.
	res := map[string][]result{}
	for rep := range l.opts.reps {
		log.Printf("repetition %d of %d", rep+1, l.opts.reps)
		for i := range names {
			name := names[i]
			if rep%2 == 1 {
				name = names[len(names)-1-i]
			}
			r, err := l.load(ctx, l.servers[name], l.opts.conns, l.opts.duration, false, "")
			if err != nil {
				return err
			}
			res[name] = append(res[name], r)
		}
	}
	fmt.Fprintf(w, "\n## Hot hit by token algorithm: wrk -t2 -c%d -d%v, %d interleaved repetitions (every other one in the reverse order), medians\n\n", l.opts.conns, l.opts.duration, l.opts.reps)
	fmt.Fprintf(w, "Token lengths:")
	for _, c := range cases {
		fmt.Fprintf(w, " %s %d;", c.name, len(bearerOf(l.servers[c.name])))
	}
	w.WriteString("\n\n")
	table(w, res, names)
	w.WriteString("\n")
	for _, c := range cases {
		base := "redis-hs256"
		if c.embedded {
			base = "embedded-hs256"
		}
		if c.name == base || res[base] == nil {
			continue
		}
		b, r := median(res[base]), median(res[c.name])
		var pairs []float64
		for i := range min(len(res[c.name]), len(res[base])) {
			pairs = append(pairs, res[c.name][i].rps/res[base][i].rps)
		}
		fmt.Fprintf(w, "- %s / %s: **%.3f×** requests/s (medians), %.3f× the median repetition's ratio, %.3f× CPU per request; each repetition:",
			c.name, base, r.rps/b.rps, medianF(pairs), float64(r.cpuPerRequest)/float64(b.cpuPerRequest))
		for _, p := range pairs {
			fmt.Fprintf(w, " %.3f", p)
		}
		w.WriteString("\n")
	}
	if err := l.tokensTogether(ctx, w, cases); err != nil {
		return err
	}
	if l.opts.profileSet && l.opts.profile {
		return l.profileTokens(ctx, w, names)
	}
	return nil
}

// tokensTogether runs each case at the same time as the HS256 case of its
// shape, -reps times: two wrk -t1 with half the connections each, for
// -duration. The two share the machine's load at every moment, so their
// ratio is free of the swings between one run and the next that the
// interleaved runs see on a shared machine; what one request costs more
// (the gateway, its client and the kernel together) shows as fewer
// requests.
func (l *lab) tokensTogether(ctx context.Context, w *strings.Builder, cases []tokenCase) error {
	type pair struct{ name, base string }
	var pairs []pair
	for _, c := range cases {
		base := "redis-hs256"
		if c.embedded {
			base = "embedded-hs256"
		}
		if c.name != base && l.servers[base] != nil {
			pairs = append(pairs, pair{c.name, base})
		}
	}
	if len(pairs) == 0 {
		return nil
	}
	ratios := map[string][]float64{}
	for rep := range l.opts.reps {
		log.Printf("together: repetition %d of %d", rep+1, l.opts.reps)
		for _, p := range pairs {
			// The padded token's case is the HS256 gateway itself: the two
			// then share one process, each with its own connections.
			a, b := l.servers[p.name], l.servers[p.base]
			a.oneThread, b.oneThread = true, true
			var ra, rb result
			var ea, eb error
			done := make(chan struct{})
			go func() { rb, eb = l.load(ctx, b, l.opts.conns/2, l.opts.duration, false, ""); close(done) }()
			ra, ea = l.load(ctx, a, l.opts.conns/2, l.opts.duration, false, "")
			<-done
			a.oneThread, b.oneThread = false, false
			if err := errors.Join(ea, eb); err != nil {
				return err
			}
			ratios[p.name] = append(ratios[p.name], ra.rps/rb.rps)
		}
	}
	fmt.Fprintf(w, "\n### Together: each case at the same time as HS256 of its shape, wrk -t1 -c%d on each, -d%v, %d repetitions\n\n",
		l.opts.conns/2, l.opts.duration, l.opts.reps)
	for _, p := range pairs {
		fmt.Fprintf(w, "- %s / %s: **%.3f×** requests/s (the median repetition's ratio); each repetition:", p.name, p.base, medianF(ratios[p.name]))
		for _, r := range ratios[p.name] {
			fmt.Fprintf(w, " %.3f", r)
		}
		w.WriteString("\n")
	}
	return nil
}

// profileTokens records each case's gateway with perf under load and
// appends, per case, the share of its samples in each of profileParts side
// by side, then the top of each profile.
func (l *lab) profileTokens(ctx context.Context, w *strings.Builder, names []string) error {
	if _, err := exec.LookPath("perf"); err != nil {
		w.WriteString("\nNo profiles: perf is not installed (Debian: linux-perf).\n")
		return nil
	}
	var tops strings.Builder
	shares := make([]map[string]float64, len(names))
	for i, name := range names {
		log.Printf("profiling %s", name)
		s := l.servers[name]
		flat, cum, err := l.profile(ctx, s, l.opts.duration)
		if err != nil {
			return err
		}
		if shares[i], err = partShares(ctx, filepath.Join(l.work, s.name+".perf.data")); err != nil {
			return err
		}
		fmt.Fprintf(&tops, "\n#### %s: by self time, then with callees\n\n```\n%s\n```\n\n```\n%s\n```\n",
			name, strings.Join(flat, "\n"), strings.Join(cum, "\n"))
	}
	fmt.Fprintf(w, "\n### Profiles (perf -F 999 -g, %v of wrk load each, the gateway's process)\n\n| part |", l.opts.duration)
	for _, name := range names {
		fmt.Fprintf(w, " %s |", name)
	}
	w.WriteString("\n|---|" + strings.Repeat("---:|", len(names)) + "\n")
	for _, p := range profileParts {
		fmt.Fprintf(w, "| %s |", p.name)
		for i := range names {
			fmt.Fprintf(w, " %.1f %% |", shares[i][p.name])
		}
		w.WriteString("\n")
	}
	w.WriteString(tops.String())
	return nil
}
