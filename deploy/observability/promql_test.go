package observability_test

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// PromQL words that are not metric names. by, without, on, ignoring,
// group_left and group_right take a parenthesised list of label names.
var (
	promqlKeywords = map[string]bool{
		"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true, "inf": true, "nan": true,
		"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true, "count": true,
		"count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true,
	}
	labelListKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
)

// metricNames returns the metric names that a PromQL expression selects,
// sorted: identifiers that are not keywords, functions (followed by "("),
// label names (inside {…} or a label list), strings, numbers or
// durations. A selector by __name__ is an error: its name cannot be
// checked.
func metricNames(expr string) ([]string, error) {
	sels, err := selectors(expr)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(sels))
	for i, sel := range sels {
		names[i] = sel.name
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// selector is a metric name and its label matchers.
type selector struct {
	name     string
	matchers []matcher
}

// matcher is one label matcher: op is =, !=, =~ or !~.
type matcher struct {
	label, op, value string
}

// matcherRE is one matcher inside {…}, with its separating comma.
var matcherRE = regexp.MustCompile(`^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`" + `)\s*(?:,|$)`)

// parseMatchers reads the inside of a selector's braces.
func parseMatchers(inside string) ([]matcher, error) {
	var out []matcher
	for rest := inside; strings.TrimSpace(rest) != ""; {
		m := matcherRE.FindStringSubmatch(rest)
		if m == nil {
			return nil, fmt.Errorf("matchers %q: cannot read %q", inside, rest)
		}
		quoted := m[3]
		if quoted[0] == '\'' {
			quoted = `"` + strings.ReplaceAll(quoted[1:len(quoted)-1], `"`, `\"`) + `"`
		}
		value, err := strconv.Unquote(quoted)
		if err != nil {
			return nil, fmt.Errorf("matchers %q: %w", inside, err)
		}
		out = append(out, matcher{label: m[1], op: m[2], value: value})
		rest = rest[len(m[0]):]
	}
	return out, nil
}

// selectors returns the metric selectors of a PromQL expression, in
// order; see metricNames for what is a name.
func selectors(expr string) ([]selector, error) {
	var sels []selector
	s := expr
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			end, err := endOfString(s, i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '{' || c == '[':
			closer := map[byte]byte{'{': '}', '[': ']'}[c]
			end, err := endOfGroup(s, i, c, closer)
			if err != nil {
				return nil, err
			}
			if c == '{' && strings.Contains(s[i:end], "__name__") {
				return nil, fmt.Errorf("selector %s names the metric by __name__", s[i:end])
			}
			i = end
		case isDigit(c) || c == '.' && i+1 < len(s) && isDigit(s[i+1]):
			// Numbers (1e-3, 0x1f, .5) and durations (5m, 1h30m).
			for i < len(s) && (isIdent(s[i]) || s[i] == '.' ||
				(s[i] == '+' || s[i] == '-') && (s[i-1] == 'e' || s[i-1] == 'E') && !strings.HasPrefix(s[i-2:], "0x")) {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			word := s[i:j]
			k := j
			for k < len(s) && (s[k] == ' ' || s[k] == '\t' || s[k] == '\n' || s[k] == '\r') {
				k++
			}
			next := byte(0)
			if k < len(s) {
				next = s[k]
			}
			switch {
			case labelListKeywords[word] && next == '(':
				end, err := endOfGroup(s, k, '(', ')')
				if err != nil {
					return nil, err
				}
				j = end
			case labelListKeywords[word], promqlKeywords[word], next == '(':
			default:
				sel := selector{name: word}
				if next == '{' {
					end, err := endOfGroup(s, k, '{', '}')
					if err != nil {
						return nil, err
					}
					inside := s[k+1 : end-1]
					if strings.Contains(inside, "__name__") {
						return nil, fmt.Errorf("selector %s names the metric by __name__", s[k:end])
					}
					if sel.matchers, err = parseMatchers(inside); err != nil {
						return nil, err
					}
					j = end
				}
				sels = append(sels, sel)
			}
			i = j
		default:
			i++
		}
	}
	return sels, nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}
func isIdent(c byte) bool { return isIdentStart(c) || isDigit(c) }

// endOfString returns the index after the string literal at s[i].
func endOfString(s string, i int) (int, error) {
	quote := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && quote != '`':
			j++
		case s[j] == quote:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string at %d in %q", i, s)
}

// endOfGroup returns the index after the closer that matches the opener
// at s[i], skipping strings.
func endOfGroup(s string, i int, opener, closer byte) (int, error) {
	depth := 0
	for j := i; j < len(s); {
		switch s[j] {
		case '"', '\'', '`':
			end, err := endOfString(s, j)
			if err != nil {
				return 0, err
			}
			j = end
			continue
		case opener:
			depth++
		case closer:
			if depth--; depth == 0 {
				return j + 1, nil
			}
		}
		j++
	}
	return 0, errors.New("unbalanced " + string(opener) + " in " + s)
}

func TestMetricNames(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`sum by (route, le) (rate(gateway_http_request_duration_seconds_bucket{route="/realty/:ref",method=~"GET|HEAD"}[5m]))`,
			[]string{"gateway_http_request_duration_seconds_bucket"}},
		{`histogram_quantile(0.99, sum(rate(a_bucket[5m])) by (le)) > 0.05`, []string{"a_bucket"}},
		{"sum(rate(x_total{code=~\"5..\"}[1h])) / on(instance) group_left(pod) y\n> (14.4 * 0.001) and z offset 5m", []string{"x_total", "y", "z"}},
		{`gateway:listing_read_errors:ratio_rate1h > (6 * 0.001) and gateway:listing_read_errors:ratio_rate30m > 1e-3`,
			[]string{"gateway:listing_read_errors:ratio_rate1h", "gateway:listing_read_errors:ratio_rate30m"}},
		{`(sum(ready{job="a"}) or vector(0)) / count(up{job="a"}) < 0.75`, []string{"ready", "up"}},
		{`min_over_time(pending[5m:1m]) > 0 unless ignoring(outcome) bool pending_total @ end()`, []string{"pending", "pending_total"}},
		{`label_replace(foo, "dst", "$1", "src", "(.*)") # a comment naming bar`, []string{"foo"}},
		{`max(go_gc_gomemlimit_bytes{instance=~".+"} < 9e18) + 0x1F - .5`, []string{"go_gc_gomemlimit_bytes"}},
		{`topk(3, sum without (code) (rate(requests_total{a="}{"}[1m])))`, []string{"requests_total"}},
	}
	for _, tt := range tests {
		got, err := metricNames(tt.expr)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("metricNames(%q) = %v, %v; want %v", tt.expr, got, err, tt.want)
		}
	}
	for _, bad := range []string{`{__name__=~"gateway_.+"}`, `sum(rate(x{a="b}[5m]))`, `sum(x{a="b"`} {
		if got, err := metricNames(bad); err == nil {
			t.Errorf("metricNames(%q) = %v, want an error", bad, got)
		}
	}
}

func TestSelectors(t *testing.T) {
	tests := []struct {
		expr string
		want []selector
	}{
		{`up`, []selector{{name: "up"}}},
		{`sum by (le) (rate(h_bucket{route="/realty/:ref", method=~"GET|HEAD",code!~'5..'}[5m])) / x {a!="b\"c"}`, []selector{
			{name: "h_bucket", matchers: []matcher{{"route", "=", "/realty/:ref"}, {"method", "=~", "GET|HEAD"}, {"code", "!~", "5.."}}},
			{name: "x", matchers: []matcher{{"a", "!=", `b"c`}}},
		}},
		{`a{} or b{c="}{",}`, []selector{{name: "a"}, {name: "b", matchers: []matcher{{"c", "=", "}{"}}}}},
	}
	for _, tt := range tests {
		got, err := selectors(tt.expr)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("selectors(%q) = %+v, %v; want %+v", tt.expr, got, err, tt.want)
		}
	}
	for _, bad := range []string{`x{a}`, `x{a="b" c="d"}`, `x{a=b}`} {
		if got, err := selectors(bad); err == nil {
			t.Errorf("selectors(%q) = %+v, want an error", bad, got)
		}
	}
}
