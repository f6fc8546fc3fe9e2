package commands

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// scanAll frames every entry of in, read through r's wrapper.
func scanAll(r io.Reader) ([]string, error) {
	sc := newArrayScanner(r)
	var got []string
	for {
		entry, done, err := sc.next()
		if err != nil || done {
			return got, err
		}
		got = append(got, string(entry))
	}
}

// readers wraps an input as a reader of each kind: the whole, a byte at a
// time (every entry crosses reads), and half of what is asked.
var readers = []struct {
	name string
	wrap func(string) io.Reader
}{
	{"whole", func(s string) io.Reader { return strings.NewReader(s) }},
	{"one byte", func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) }},
	{"half", func(s string) io.Reader { return iotest.HalfReader(strings.NewReader(s)) }},
}

func TestArrayScannerFramesWhatJSONDoes(t *testing.T) {
	for _, in := range []string{
		`[]`, ` [ ] `, "[\n]\n",
		`[{"a":1}]`,
		`[{"a":"]}\"{["},{"b":[1,[2,{"c":"\\"}]]}]`,
		"[ {\"a\" : 1 } ,\n\t{ } , [ ] ]",
		`[1, -2.5e3, true, false, null, "x,]"]`,
		`[{"title":"` + strings.Repeat("long ", 40_000) + `"}]`, // past the first buffer
	} {
		var want []json.RawMessage
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatalf("bad case %q: %v", in, err)
		}
		for _, r := range readers {
			got, err := scanAll(r.wrap(in))
			if err != nil {
				t.Fatalf("%s: %.60q: %v", r.name, in, err)
			}
			if len(got) != len(want) {
				t.Fatalf("%s: %.60q: %d entries; want %d", r.name, in, len(got), len(want))
			}
			for i := range got {
				if got[i] != string(want[i]) {
					t.Fatalf("%s: %.60q: entry %d is %.60q; want %.60q", r.name, in, i, got[i], want[i])
				}
			}
		}
	}
}

func TestArrayScannerRefuses(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{``, "unexpected EOF"},
		{`{"id":1}`, `found '{'`},
		{`[{"a":1}`, "unexpected EOF"},
		{`[{"a":"1}]`, "entry 0: unexpected EOF"},
		{`[{"a":1} {"b":2}]`, `after entry 0: found '{', want , or ]`},
		{`[{"a":1}] x`, `found 'x' after it`},
		{`["` + strings.Repeat("x", maxEntry) + `"]`, "entry 0: longer than"},
	} {
		for _, r := range readers[:1] {
			_, err := scanAll(r.wrap(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "want a JSON array of listings") {
				t.Fatalf("%.40q: error %v; want one saying %q", tt.in, err, tt.want)
			}
		}
	}
}

// FuzzArrayScanner: on any input the scanner ends without a panic, and
// where the input is a JSON array it frames the entries json.Unmarshal
// finds, byte for byte.
func FuzzArrayScanner(f *testing.F) {
	for _, s := range []string{`[]`, `[{"a":"]}\"{["},[1,2]]`, `[1,"x",null]`, `[{"a":1}`, `["\\"]`, `[1 2]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := scanAll(iotest.HalfReader(bytes.NewReader(in)))
		var want []json.RawMessage
		if json.Unmarshal(in, &want) != nil || !bytes.HasPrefix(bytes.TrimLeft(in, " \t\r\n"), []byte("[")) {
			return // not an array (json.Unmarshal takes null too)
		}
		if err != nil {
			t.Fatalf("%q: %v; json.Unmarshal frames %q", in, err, want)
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %q; want %q", in, got, want)
		}
		for i := range got {
			if got[i] != string(want[i]) {
				t.Fatalf("%q: entry %d is %q; want %q", in, i, got[i], want[i])
			}
		}
	})
}
