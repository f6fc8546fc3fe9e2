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

// BenchmarkImportEntries frames, checks and decodes a file of 1,000
// listings of about 1.7 KB (the import bench's shape), as the import
// command does.
func BenchmarkImportEntries(b *testing.B) {
	var f strings.Builder
	f.WriteString("[")
	for i := range 1000 {
		if i > 0 {
			f.WriteString(",\n")
		}
		fmt.Fprintf(&f, `{"firmId":1,"firmUserId":1,"title":"Sea-view flat %d","categoryId":1,"subCategoryId":4,`+
			`"createdDate":1700000000000,"updatedDate":1700000100000,"endDate":1800000000000,"note":"Viewing by appointment",`+
			`"realtyDetailUrl":"https://example.com/realty/%d","realtyIdentificationNo":"TR-34-1203-%d","energyDocumentNo":"E-2024-0077",`+
			`"location":{"cityId":34,"cityName":"Istanbul","countyId":12,"countyName":"Kadikoy","districtId":1203,"districtName":"Moda","latitude":40.98,"longitude":29.02,"nearLocation":true},`+
			`"attributes":{"description":"Bright three-room flat, renovated in 2023, close to the ferry.","price":8500000,"priceCurrencyType":"TRY","room":3,"livingRoom":1,"bathRoom":2,"sqm":120,"netSqm":105,"age":12,"floorCount":6,"heatingId":2,"floorId":4,"furnished":false,"sideIdList":[1,2,3],"selectedAttributeList":[{"groupId":1,"selectedIds":[3,4]},{"groupId":2,"selectedIds":[7]}]},`+
			`"realtyFiles":[`, i, i, i)
		for n := 1; n <= 7; n++ {
			if n > 1 {
				f.WriteString(",")
			}
			fmt.Fprintf(&f, `{"id":%d,"imageUrl":"https://img.example.com/%d/photo-%d.jpg","sortOrder":%d,"imageType":"IMAGE","status":"APPROVED"}`, n, i, n, n)
		}
		f.WriteString("]}")
	}
	f.WriteString("]")
	file := f.String()
	b.SetBytes(int64(len(file)))
	for b.Loop() {
		n := 0
		for _, err := range importEntries(strings.NewReader(file)) {
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		if n != 1000 {
			b.Fatalf("%d entries; want 1000", n)
		}
	}
}
