package docs

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// markdownFiles are the files whose links are checked, relative to this
// directory: the README, the files here and any under deploy/.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"../README.md"}
	for _, pattern := range []string{"*.md", "../deploy/*/*.md"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	return files
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan   = regexp.MustCompile("`[^`]*`")
	inlineLink = regexp.MustCompile(`!?\[([^\]]*)\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	heading    = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

// prose is the file's text outside fenced code blocks, split into
// paragraphs (a code span or a link never crosses a blank line).
func prose(text string) []string {
	var paras []string
	var cur []string
	inFence := false
	flush := func() {
		if len(cur) > 0 {
			paras = append(paras, strings.Join(cur, "\n"))
			cur = nil
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			flush()
			continue
		}
		if inFence {
			continue
		}
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		cur = append(cur, line)
	}
	flush()
	return paras
}

// links are the targets of the file's inline links and link reference
// definitions, code spans and fenced blocks left out.
func links(text string) []string {
	var out []string
	for _, p := range prose(text) {
		p = codeSpan.ReplaceAllString(p, "code")
		for _, m := range inlineLink.FindAllStringSubmatch(p, -1) {
			out = append(out, m[2])
		}
		for _, m := range refDef.FindAllStringSubmatch(p, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// slug is GitHub's anchor for a heading: the text as rendered (link
// targets, code and emphasis marks gone), lower case, every character but
// letters, digits, '_', '-' and spaces removed, spaces turned into '-'.
func slug(h string) string {
	h = inlineLink.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// anchors are the fragments that lead somewhere in the file: each
// heading's slug (a repeated one with -1, -2, … as GitHub numbers them)
// and each HTML anchor.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			s := slug(m[2])
			if n := seen[s]; n > 0 {
				out[fmt.Sprintf("%s-%d", s, n)] = true
			} else {
				out[s] = true
			}
			seen[s]++
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
	}
	return out
}

// brokenLinks lists what is wrong with the relative links of the
// Markdown file at path: a target that does not exist, or an anchor that
// no heading of its file makes.
func brokenLinks(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	text := string(b)
	var broken []string
	for _, target := range links(text) {
		u, err := url.Parse(target)
		if err != nil {
			broken = append(broken, fmt.Sprintf("%s: unparsable link %q", path, target))
			continue
		}
		if u.Scheme != "" || u.Host != "" {
			continue // absolute: not ours to check
		}
		file, fileText := path, text
		if u.Path != "" {
			file = filepath.Join(filepath.Dir(path), filepath.FromSlash(u.Path))
			fb, err := os.ReadFile(file)
			switch {
			case err == nil:
				fileText = string(fb)
			case u.Fragment == "":
				if _, err := os.Stat(file); err == nil { // a directory
					continue
				}
				broken = append(broken, fmt.Sprintf("%s: link %q: no such file", path, target))
				continue
			default:
				broken = append(broken, fmt.Sprintf("%s: link %q: %v", path, target, err))
				continue
			}
		}
		if u.Fragment == "" {
			continue
		}
		if !strings.HasSuffix(file, ".md") {
			broken = append(broken, fmt.Sprintf("%s: link %q: an anchor into a file that is not Markdown", path, target))
			continue
		}
		if !anchors(fileText)[u.Fragment] {
			broken = append(broken, fmt.Sprintf("%s: link %q: %s has no heading with anchor #%s", path, target, file, u.Fragment))
		}
	}
	return broken, nil
}

// TestLinksResolve: every relative link in README.md, docs/*.md and the
// Markdown under deploy/ names a file that exists, and every #anchor a
// heading of its file.
func TestLinksResolve(t *testing.T) {
	checked := 0
	for _, f := range markdownFiles(t) {
		broken, err := brokenLinks(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range broken {
			t.Error(b)
		}
		checked += len(links(mustRead(t, f)))
	}
	if checked < 10 {
		t.Errorf("only %d links found: the link pattern no longer matches", checked)
	}
}

// TestBrokenLinksAreFound: the check fails on a missing file, a missing
// anchor in another file and in its own, and passes the forms GitHub
// resolves.
func TestBrokenLinksAreFound(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("other.md", "# Other\n\n## Writes: POST /realty, PUT and DELETE /realty/{realtyId|listingId}\n\n## `GET /openapi.yaml`\n\n## Same\n\n## Same\n")
	write("a.md", strings.Join([]string{
		"# A",
		"",
		"[ok](other.md) [ok](other.md#writes-post-realty-put-and-delete-realtyrealtyidlistingid)",
		"[ok](other.md#get-openapiyaml) [ok](other.md#same-1) [ok](#a) [ok](https://example.com/x.md#nope)",
		"[bad file](missing.md) [bad anchor](other.md#nope) [bad own](#nope)",
		"`[in code](missing-in-code.md)`",
		"",
		"```",
		"[in a fence](missing-in-fence.md)",
		"```",
		"",
		"[bad ref]: gone.md",
	}, "\n"))
	broken, err := brokenLinks(filepath.Join(dir, "a.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"missing.md", "other.md#nope", "#nope", "gone.md"}
	if len(broken) != len(want) {
		t.Fatalf("broken links %q, want one for each of %q", broken, want)
	}
	for i, w := range want {
		if !strings.Contains(broken[i], `"`+w+`"`) {
			t.Errorf("broken[%d] = %q, want it about %q", i, broken[i], w)
		}
	}
}

// TestREADMEMapsEveryDoc: the README's map links every file here.
func TestREADMEMapsEveryDoc(t *testing.T) {
	readme := mustRead(t, "../README.md")
	mapped := map[string]bool{}
	for _, l := range links(readme) {
		mapped[strings.SplitN(l, "#", 2)[0]] = true
	}
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no Markdown files in docs/")
	}
	for _, d := range docs {
		if !mapped["docs/"+d] {
			t.Errorf("README.md does not link docs/%s", d)
		}
	}
}

// TestCIRunsTheREADMETestCommand: .ci/run has a `go test` line with every
// argument of the one the README's Set-up gives (CI may add its own, such
// as -count=1).
func TestCIRunsTheREADMETestCommand(t *testing.T) {
	readme := mustRead(t, "../README.md")
	_, setup, ok := strings.Cut(readme, "\n## Set-up\n")
	if !ok {
		t.Fatal(`README.md has no section "## Set-up"`)
	}
	setup, _, _ = strings.Cut(setup, "\n## ")
	var want []string
	for _, line := range strings.Split(setup, "\n") {
		cmd, _, _ := strings.Cut(line, "#")
		if f := strings.Fields(cmd); len(f) > 2 && f[0] == "go" && f[1] == "test" {
			want = f
			break
		}
	}
	if want == nil {
		t.Fatal("README.md's Set-up gives no `go test` command")
	}
	ci := mustRead(t, "../.ci/run")
	for _, line := range strings.Split(ci, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "go" || f[1] != "test" {
			continue
		}
		has := map[string]bool{}
		for _, a := range f {
			has[a] = true
		}
		all := true
		for _, a := range want {
			all = all && has[a]
		}
		if all {
			return
		}
	}
	t.Errorf(".ci/run has no `go test` line with every argument of the README's %q", strings.Join(want, " "))
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
