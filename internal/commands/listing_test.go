package commands

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/upstream"
)

// file is a JSON array of n minimal listings with ids 1..n; bad, when
// positive, is the index of an entry without its required title.
func file(n, bad int) string {
	var b strings.Builder
	b.WriteString("[\n")
	for i := range n {
		if i > 0 {
			b.WriteString(",\n")
		}
		title := `"title":"Flat",`
		if i == bad {
			title = ""
		}
		fmt.Fprintf(&b, `{"id":%d,%s"categoryId":1,"location":{"cityId":6},"firmId":1,"firmUserId":1}`, i+1, title)
	}
	b.WriteString("\n]")
	return b.String()
}

func TestImportEntries(t *testing.T) {
	const n = 3*decodeChunk + 5 // several chunks, decoded in parallel
	tests := []struct {
		name      string
		give      string
		wantN     int    // listings yielded before the end or the error
		wantIndex int    // the *ImportError's entry; -1: none
		wantText  string // in the error; "": none
	}{
		{name: "several chunks in file order", give: file(n, -1), wantN: n, wantIndex: -1},
		{name: "an empty array", give: "[]", wantN: 0, wantIndex: -1},
		{name: "a bad entry in a later chunk", give: file(n, 2*decodeChunk+3), wantN: 2*decodeChunk + 3, wantIndex: 2*decodeChunk + 3, wantText: "title"},
		{name: "not an array", give: `{"id":1}`, wantIndex: -1, wantText: "want a JSON array of listings"},
		{name: "cut short", give: file(n, -1)[:decodeChunk*40], wantN: -1, wantIndex: -1, wantText: "want a JSON array of listings"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []upstream.Listing
			var err error
			for l, e := range importEntries(strings.NewReader(tt.give)) {
				if e != nil {
					err = e
					break
				}
				got = append(got, l)
			}
			for i, l := range got {
				if l.ID != int64(i+1) {
					t.Fatalf("entry %d has id %d; want %d (file order)", i, l.ID, i+1)
				}
			}
			if tt.wantN >= 0 && len(got) != tt.wantN {
				t.Fatalf("yielded %d listings; want %d", len(got), tt.wantN)
			}
			var ie *upstream.ImportError
			switch {
			case tt.wantText == "" && err != nil:
				t.Fatalf("error %v; want none", err)
			case tt.wantText != "" && (err == nil || !strings.Contains(err.Error(), tt.wantText)):
				t.Fatalf("error %v; want one saying %q", err, tt.wantText)
			case tt.wantIndex >= 0 && (!errors.As(err, &ie) || ie.Index != tt.wantIndex || ie.ID != int64(tt.wantIndex+1)):
				t.Fatalf("error %v; want entry %d (id %d) named", err, tt.wantIndex, tt.wantIndex+1)
			}
		})
	}
}

// TestImportEntriesStopsEarly: a consumer that stops (the store refused an
// entry) ends the reading.
func TestImportEntriesStopsEarly(t *testing.T) {
	seen := 0
	for range importEntries(strings.NewReader(file(10*decodeChunk, -1))) {
		if seen++; seen == 3 {
			break
		}
	}
	if seen != 3 {
		t.Fatalf("yielded %d; want 3", seen)
	}
}

func TestProgressLine(t *testing.T) {
	var out strings.Builder
	in := &countingReader{size: 1000}
	in.n.Store(250)
	p := &progress{w: &out, in: in, began: time.Now().Add(-10 * time.Second)}
	p.add(5000)
	line := out.String()
	for _, want := range []string{"\r5000 listings", "500/s", "25%", "30s left"} {
		if !strings.Contains(line, want) {
			t.Fatalf("progress %q; want %q in it", line, want)
		}
	}
	out.Reset()
	p.add(1) // within progressEvery: not drawn again
	if out.Len() != 0 {
		t.Fatalf("progress drawn again at once: %q", out.String())
	}
	p.end()
	if !strings.HasSuffix(out.String(), "\n") || !strings.Contains(out.String(), "5001 listings") {
		t.Fatalf("last progress line %q; want the total, ended", out.String())
	}
}
