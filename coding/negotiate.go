package coding

import "bytes"

// Negotiate chooses the coding of a response from the lines of a request's
// Accept-Encoding field (RFC 9110 §12.5.3):
//   - no field, or an empty one: Identity;
//   - each coding gets the weight (q, in thousandths) of its own element,
//     else that of "*", else none; identity is acceptable unless
//     "identity;q=0", or "*;q=0" without an element for identity, says
//     otherwise;
//   - the accepted coding of highest weight wins; among equal weights, a
//     compressed one before Identity, and among those gzip, then br, then
//     zstd (see preference);
//   - codings this package does not send are ignored, as are elements
//     that do not parse.
//
// ok is false when no coding the gateway sends is acceptable: the answer
// is then 406. It allocates nothing.
func Negotiate(lines [][]byte) (c Coding, ok bool) {
	if len(lines) == 0 {
		// No field: what weigh would give (identity alone, weight 1),
		// without weighing every coding on the hot hit of a client that
		// sends none.
		return Identity, true
	}
	weight := weigh(lines)
	best, bestWeight := Identity, weight[Identity]
	for _, c := range preference() {
		if weight[c] > 0 && weight[c] >= bestWeight && (best == Identity || weight[c] > bestWeight) {
			best, bestWeight = c, weight[c]
		}
	}
	return best, bestWeight > 0
}

// Acceptable reports whether the lines of an Accept-Encoding field accept
// c, weighed as Negotiate weighs them: a response falls back on Identity,
// where a coding would not make its body smaller, only if so.
func Acceptable(lines [][]byte, c Coding) bool { return weigh(lines)[c] > 0 }

// weigh returns each coding's weight under the lines of an Accept-Encoding
// field, as Negotiate describes; 0: not acceptable.
func weigh(lines [][]byte) [Count]int {
	var (
		weight [Count]int // -1: no element for the coding
		star   = -1
	)
	for i := range weight {
		weight[i] = -1
	}
	for _, line := range lines {
		for len(line) > 0 {
			var elem []byte
			elem, line, _ = bytes.Cut(line, []byte(","))
			name, params, _ := bytes.Cut(elem, []byte(";"))
			name = bytes.TrimSpace(name)
			if len(name) == 0 {
				continue
			}
			q, valid := qvalue(params)
			if !valid {
				continue
			}
			switch {
			case len(name) == 1 && name[0] == '*':
				star = q
			default:
				if c, known := named(name); known {
					weight[c] = q
				}
			}
		}
	}
	for i := range weight {
		if weight[i] < 0 {
			switch {
			case star >= 0:
				weight[i] = star
			case Coding(i) == Identity:
				weight[i] = 1 // acceptable unless excluded, least preferred
			default:
				weight[i] = 0
			}
		}
	}
	return weight
}

// preference orders the codings a request accepts equally. A version is
// compressed once per coding, at the first request for it, so a listing
// read once pays its coding's whole cost: gzip makes a listing about 8 %
// larger than br, at a fourth to a tenth of br's CPU (BenchmarkCompress),
// and every client and CDN takes it; br and zstd go to the clients that
// weigh them higher, or take nothing else.
func preference() [Count - 1]Coding { return [Count - 1]Coding{Gzip, Brotli, Zstd} }

// named returns the coding a token names, in any case; x-gzip is gzip
// (RFC 9110 §8.4.1.3).
func named(name []byte) (Coding, bool) {
	if bytes.EqualFold(name, []byte("x-gzip")) {
		return Gzip, true
	}
	for c := range Count {
		if bytes.EqualFold(name, []byte(c.Name())) {
			return c, true
		}
	}
	return 0, false
}

// qvalue reads the weight among an element's parameters: 1000 without one;
// "q=" 0, 0.d, 0.dd, 0.ddd, 1, 1.0, 1.00 or 1.000, in thousandths
// (RFC 9110 §12.4.2). valid is false for a weight that does not parse.
func qvalue(params []byte) (q int, valid bool) {
	q = 1000
	for len(params) > 0 {
		var p []byte
		p, params, _ = bytes.Cut(params, []byte(";"))
		p = bytes.TrimSpace(p)
		if len(p) < 2 || (p[0] != 'q' && p[0] != 'Q') || p[1] != '=' {
			continue
		}
		v := p[2:]
		if len(v) == 0 || len(v) > 5 || (v[0] != '0' && v[0] != '1') {
			return 0, false
		}
		q = int(v[0]-'0') * 1000
		if len(v) > 1 {
			if v[1] != '.' {
				return 0, false
			}
			scale := 100
			for _, d := range v[2:] {
				if d < '0' || d > '9' || (v[0] == '1' && d != '0') {
					return 0, false
				}
				q += int(d-'0') * scale
				scale /= 10
			}
		}
	}
	return q, true
}
