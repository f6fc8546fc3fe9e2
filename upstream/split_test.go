package upstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// FuzzSplit: on any valid JSON document, the splitters give what
// json.Unmarshal into a map[string]json.RawMessage or a []json.RawMessage
// gives, members, names and value bytes alike, and refuse what it refuses.
func FuzzSplit(f *testing.F) {
	for _, seed := range []string{
		`{}`, `[]`, `null`, `1`, `"x"`, `true`, ` { "a" : 1 , "b" : [ 1 , { "c" : "}" } ] } `,
		`{"a":1,"a":{"x":2},"A":3}`, `{"title":1,"ti\u0074le":2,"title":3,"location":{}}`, `{"a\"b":"c\\","\u00e9":null,"\ud800":1}`, "{\"\xff\":1}",
		`[1, "two", {"three":[3]}, [], {}, null, -1.5e3, false]`, `{"":""}`, "{\n\t\"a\"\r:\n[\n]\n}",
		`{"title":"x","location":{"cityId":34,"latitude":40.98},"realtyFiles":[{"id":1},{"id":2}]}`,
		`{"a"`, `{"a":`, `{"a":1`, `{"a" 1}`, `{"a":1 "b":2}`, `[1`, `[1 2]`, `[,]`, `{,}`, `{"\`, `"`, `{"a":[}`, `{`, `[`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			splitObject(raw, nil, nil) // must not panic; the result is undefined
			splitArray(raw)
			_, _ = DecodeValidListing(raw, true)
			return
		}
		var wantObject map[string]json.RawMessage
		objectErr := json.Unmarshal(raw, &wantObject)
		for _, known := range []map[string]field{nil, fieldsOf(reflect.TypeFor[Listing]())} {
			members, ok := splitObject(raw, known, nil)
			if ok != (objectErr == nil && wantObject != nil) {
				t.Fatalf("splitObject(%q) ok=%v; json.Unmarshal: %v, %v", raw, ok, wantObject, objectErr)
			}
			if !ok {
				continue
			}
			got := map[string]json.RawMessage{}
			for _, m := range members {
				got[m.name] = m.value
			}
			if len(got) != len(members) || !maps.EqualFunc(got, wantObject, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) {
				t.Fatalf("splitObject(%q)\n%s\njson.Unmarshal\n%q", raw, showMembers(members), wantObject)
			}
		}
		var wantArray []json.RawMessage
		arrayErr := json.Unmarshal(raw, &wantArray)
		gotArray, ok := splitArray(raw)
		switch {
		case ok != (arrayErr == nil && wantArray != nil):
			t.Fatalf("splitArray(%q) ok=%v; json.Unmarshal: %v, %v", raw, ok, wantArray, arrayErr)
		case ok && !slices.EqualFunc(gotArray, wantArray, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }):
			t.Fatalf("splitArray(%q)\n%q\njson.Unmarshal\n%q", raw, gotArray, wantArray)
		}
	})
}

func showMembers(members []member) string {
	var b strings.Builder
	for _, m := range members {
		fmt.Fprintf(&b, "%q: %s\n", m.name, m.value)
	}
	return b.String()
}

// BenchmarkDecodeListing decodes the import benchmark's listing: 1.7 KB,
// seven photos (deploy/bench's listingsJSON).
func BenchmarkDecodeListing(b *testing.B) {
	body := []byte(`{"firmId":1,"firmUserId":1,"title":"Sea-view flat 7","categoryId":1,"subCategoryId":4,"createdDate":1700000000000,"updatedDate":1700000100000,"endDate":1800000000000,"note":"Viewing by appointment","realtyDetailUrl":"https://example.com/realty/7","realtyIdentificationNo":"TR-34-1203-7","energyDocumentNo":"E-2024-0077","location":{"cityId":34,"cityName":"Istanbul","countyId":12,"countyName":"Kadikoy","districtId":1203,"districtName":"Moda","latitude":40.98,"longitude":29.02,"nearLocation":true},"attributes":{"description":"Bright three-room flat, renovated in 2023, close to the ferry.","price":8500000,"priceCurrencyType":"TRY","room":3,"livingRoom":1,"bathRoom":2,"sqm":120,"netSqm":105,"age":12,"floorCount":6,"heatingId":2,"floorId":4,"furnished":false,"sideIdList":[1,2,3],"selectedAttributeList":[{"groupId":1,"selectedIds":[3,4]},{"groupId":2,"selectedIds":[7]}]},"realtyFiles":[` +
		`{"id":1,"imageUrl":"https://img.example.com/7/photo-1.jpg","sortOrder":1,"imageType":"IMAGE","status":"APPROVED"},{"id":2,"imageUrl":"https://img.example.com/7/photo-2.jpg","sortOrder":2,"imageType":"IMAGE","status":"APPROVED"},` +
		`{"id":3,"imageUrl":"https://img.example.com/7/photo-3.jpg","sortOrder":3,"imageType":"IMAGE","status":"APPROVED"},{"id":4,"imageUrl":"https://img.example.com/7/photo-4.jpg","sortOrder":4,"imageType":"IMAGE","status":"APPROVED"},` +
		`{"id":5,"imageUrl":"https://img.example.com/7/photo-5.jpg","sortOrder":5,"imageType":"IMAGE","status":"APPROVED"},{"id":6,"imageUrl":"https://img.example.com/7/photo-6.jpg","sortOrder":6,"imageType":"IMAGE","status":"APPROVED"},` +
		`{"id":7,"imageUrl":"https://img.example.com/7/photo-7.jpg","sortOrder":7,"imageType":"IMAGE","status":"APPROVED"}]}`)
	if _, err := DecodeListing(body, true); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeListing(body, true); err != nil {
			b.Fatal(err)
		}
	}
}
