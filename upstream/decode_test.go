package upstream

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

const validBody = `{"title":"Flat","categoryId":1,"location":{"cityId":34}}`

func TestDecodeListingReportsEveryBadField(t *testing.T) {
	tests := []struct {
		name string
		give string
		want []string // the fields named, in order
	}{
		{name: "not an object", give: `[1]`, want: []string{""}},
		{name: "empty object", give: `{}`, want: []string{"categoryId", "location.cityId", "title"}},
		{name: "types", give: `{"title":5,"categoryId":"1","location":{"cityId":1.5},"isActive":"yes"}`,
			want: []string{"categoryId", "isActive", "location.cityId", "title"}},
		{name: "integer as float", give: `{"title":"x","categoryId":1.5,"location":{"cityId":1}}`, want: []string{"categoryId"}},
		{name: "latitude out of range", give: `{"title":"x","categoryId":1,"location":{"cityId":1,"latitude":90.5,"longitude":-180.1}}`,
			want: []string{"location.latitude", "location.longitude"}},
		{name: "top-level latitude out of range", give: `{"title":"x","categoryId":1,"latitude":-91,"location":{"cityId":1}}`,
			want: []string{"location.latitude"}},
		{name: "enums", give: `{"title":"x","categoryId":1,"location":{"cityId":1},"realtyFiles":[{"imageType":"GIF","status":"PENDING"}]}`,
			want: []string{"realtyFiles[0].imageType", "realtyFiles[0].status"}},
		{name: "title too long", give: `{"title":"` + strings.Repeat("é", MaxTitleRunes+1) + `","categoryId":1,"location":{"cityId":1}}`, want: []string{"title"}},
		{name: "description too long", give: `{"title":"x","categoryId":1,"location":{"cityId":1},"attributes":{"description":"` + strings.Repeat("a", MaxDescriptionRunes+1) + `"}}`,
			want: []string{"attributes.description"}},
		{name: "note too long", give: `{"title":"x","note":"` + strings.Repeat("a", MaxNoteRunes+1) + `","categoryId":1,"location":{"cityId":1}}`, want: []string{"note"}},
		{name: "too many files", give: `{"title":"x","categoryId":1,"location":{"cityId":1},"realtyFiles":[` + strings.Repeat(`{},`, MaxFiles) + `{}]}`,
			want: []string{"realtyFiles"}},
		{name: "unknown members", give: `{"title":"x","categoryId":1,"location":{"cityId":1,"zip":"1"},"colour":"red","attributes":{"pool":true}}`,
			want: []string{"attributes.pool", "colour", "location.zip"}},
		{name: "null for a required boolean", give: `{"title":"x","categoryId":1,"location":{"cityId":1},"isActive":null}`, want: []string{"isActive"}},
		{name: "array of wrong items", give: `{"title":"x","categoryId":1,"location":{"cityId":1},"attributes":{"sideIdList":[1,"2"]}}`,
			want: []string{"attributes.sideIdList[1]"}},
		{name: "object expected", give: `{"title":"x","categoryId":1,"location":[]}`, want: []string{"location"}},
		{name: "file id that leaves no room", give: `{"title":"x","categoryId":1,"location":{"cityId":1},"realtyFiles":[{"id":9223372036854775807},{}]}`,
			want: []string{"realtyFiles[0].id"}},
		{name: "blank title", give: `{"title":"   ","categoryId":1,"location":{"cityId":1}}`, want: []string{"title"}},
		{name: "latitude given twice", give: `{"title":"x","categoryId":1,"latitude":1000,"location":{"cityId":1,"latitude":1}}`, want: []string{"latitude"}},
		{name: "negative no", give: `{"title":"x","no":-1,"categoryId":1,"location":{"cityId":1}}`, want: []string{"no"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeListing([]byte(tt.give), false)
			var ve *ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want a ValidationError", err)
			}
			var got []string
			for _, f := range ve.Fields {
				got = append(got, f.Field)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("fields %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDecodeListingDefaultsAndServerSetMembers(t *testing.T) {
	body := `{"id":9,"listingId":"1-2","firmId":3,"firmUserId":4,"createdDate":5,"updatedDate":6,"no":7,
		"title":"x","categoryId":1,"latitude":41.5,"longitude":29.1,"nearLocation":true,
		"location":{"cityId":34},"realtyFiles":[{"imageUrl":"u"},{"id":7,"status":"APPROVED"}]}`
	tests := []struct {
		name           string
		keepServerSet  bool
		wantID, wantFU int64
	}{
		{name: "write body ignores server-set members", keepServerSet: false, wantID: 0, wantFU: 0},
		{name: "import keeps them", keepServerSet: true, wantID: 9, wantFU: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := DecodeListing([]byte(body), tt.keepServerSet)
			if err != nil {
				t.Fatal(err)
			}
			if l.ID != tt.wantID || l.FirmUserID != tt.wantFU || l.No != 7 {
				t.Fatalf("id %d firmUserId %d no %d", l.ID, l.FirmUserID, l.No)
			}
			if !l.IsActive {
				t.Error("isActive did not default to true")
			}
			if l.Location.Latitude == nil || *l.Location.Latitude != 41.5 || l.Location.NearLocation == nil || !*l.Location.NearLocation {
				t.Error("top-level coordinates not moved into location")
			}
			if s := l.RealtyFiles[0].Status; s == nil || *s != "APPROVED" {
				t.Error("file status did not default to APPROVED")
			}
			l.Normalize()
			if l.RealtyFiles[0].ID != 8 || l.RealtyFiles[1].ID != 7 {
				t.Errorf("file ids %d, %d; want 8 assigned and 7 kept", l.RealtyFiles[0].ID, l.RealtyFiles[1].ID)
			}
		})
	}
}

func TestDecodeListingAcceptsItsOwnResponse(t *testing.T) {
	l, err := DecodeListing([]byte(validBody), false)
	if err != nil {
		t.Fatal(err)
	}
	l.ID, l.FirmID, l.FirmUserID, l.No = 5, 6, 7, 8
	l.Normalize()
	out, _ := json.Marshal(l)
	if _, err := DecodeListing(out, false); err != nil {
		t.Fatalf("a GET-then-PUT round trip is refused: %v", err)
	}
}

func TestDecodeListingNumberBounds(t *testing.T) {
	const outOfRange = "is out of range: must be within [1, 9007199254740991]"
	body := func(members string) string {
		return `{"title":"x","categoryId":1,"location":{"cityId":1},` + members + `}`
	}
	tests := []struct {
		name      string
		give      string
		giveKeep  bool // keepServerSet, as imports decode
		wantID    int64
		wantNo    int64
		wantField string // when refused, with message outOfRange
	}{
		{name: "no at the bound", give: body(`"no":9007199254740991`), wantNo: MaxNumber},
		{name: "no 0 is assigned later", give: body(`"no":0`), wantNo: 0},
		{name: "no 1", give: body(`"no":1`), wantNo: 1},
		{name: "no past the bound", give: body(`"no":9007199254740992`), wantField: "no"},
		{name: "no at the int64 maximum", give: body(`"no":9223372036854775807`), wantField: "no"},
		{name: "no past the int64 maximum", give: body(`"no":9223372036854775808`), wantField: "no"},
		{name: "negative no", give: body(`"no":-1`), wantField: "no"},
		{name: "import id at the bound", give: body(`"id":9007199254740991`), giveKeep: true, wantID: MaxNumber},
		{name: "import id past the bound", give: body(`"id":9007199254740992`), giveKeep: true, wantField: "id"},
		{name: "import id at the int64 maximum", give: body(`"id":9223372036854775807`), giveKeep: true, wantField: "id"},
		{name: "import id past the int64 maximum", give: body(`"id":99999999999999999999`), giveKeep: true, wantField: "id"},
		{name: "negative import id", give: body(`"id":-5`), giveKeep: true, wantField: "id"},
		{name: "import no past the bound", give: body(`"no":9007199254740992`), giveKeep: true, wantField: "no"},
		{name: "write body id past the bound is ignored", give: body(`"id":9223372036854775807`), wantID: 0},
		{name: "file id past the bound", give: body(`"realtyFiles":[{"id":9007199254740992}]`), wantField: "realtyFiles[0].id"},
		{name: "file id past the int64 maximum", give: body(`"realtyFiles":[{"id":9223372036854775808}]`), wantField: "realtyFiles[0].id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := DecodeListing([]byte(tt.give), tt.giveKeep)
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("DecodeListing() error = %v", err)
				}
				if l.ID != tt.wantID || l.No != tt.wantNo {
					t.Fatalf("id, no = %d, %d; want %d, %d", l.ID, l.No, tt.wantID, tt.wantNo)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("DecodeListing() error = %v; want a *ValidationError", err)
			}
			want := []FieldError{{Field: tt.wantField, Message: outOfRange}}
			if !slices.Equal(ve.Fields, want) {
				t.Fatalf("fields %+v; want %+v", ve.Fields, want)
			}
		})
	}
}

func TestDecodeListingIntegerMessages(t *testing.T) {
	const (
		notInteger = "must be an integer"
		outOfInt64 = "is out of range: must be within [-9223372036854775808, 9223372036854775807]"
	)
	tests := []struct {
		name      string
		give      string // categoryId's JSON
		wantField string
		want      string
	}{
		{name: "fraction", give: `1.5`, want: notInteger},
		{name: "string", give: `"x"`, want: notInteger},
		{name: "integral fraction", give: `1.0`, want: notInteger},
		{name: "exponent", give: `1e3`, want: notInteger},
		{name: "above int64", give: `9223372036854775808`, want: outOfInt64},
		{name: "below int64", give: `-9223372036854775809`, want: outOfInt64},
		{name: "far above int64", give: `123456789012345678901234567890`, want: outOfInt64},
		{name: "int64 maximum", give: `9223372036854775807`},
		{name: "int64 minimum", give: `-9223372036854775808`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"title":"x","categoryId":` + tt.give + `,"location":{"cityId":1}}`
			_, err := DecodeListing([]byte(body), false)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("DecodeListing() error = %v", err)
				}
				return
			}
			var ve *ValidationError
			want := []FieldError{{Field: "categoryId", Message: tt.want}}
			if !errors.As(err, &ve) || !slices.Equal(ve.Fields, want) {
				t.Fatalf("DecodeListing() error = %v; want fields %+v", err, want)
			}
		})
	}

	// The same holds in arrays and nested objects.
	body := `{"title":"x","categoryId":1,"location":{"cityId":1,"countyId":1.5},
		"attributes":{"sideIdList":[1,18446744073709551616],"heatingId":-99999999999999999999}}`
	_, err := DecodeListing([]byte(body), false)
	want := []FieldError{
		{Field: "attributes.heatingId", Message: outOfInt64},
		{Field: "attributes.sideIdList[1]", Message: outOfInt64},
		{Field: "location.countyId", Message: notInteger},
	}
	var ve *ValidationError
	if !errors.As(err, &ve) || !slices.Equal(ve.Fields, want) {
		t.Fatalf("nested: DecodeListing() error = %v; want fields %+v", err, want)
	}
}

func TestIntRange(t *testing.T) {
	tests := []struct {
		give           string
		wantLo, wantHi int64
	}{
		{give: "no", wantLo: 1, wantHi: MaxNumber},
		{give: "id", wantLo: 1, wantHi: MaxNumber},
		{give: "realtyFiles[12].id", wantLo: 1, wantHi: MaxFileID},
		{give: "realtyFiles[0].sortOrder", wantLo: math.MinInt64, wantHi: math.MaxInt64},
		{give: "categoryId", wantLo: math.MinInt64, wantHi: math.MaxInt64},
		{give: "attributes.selectedAttributeList[0].groupId", wantLo: math.MinInt64, wantHi: math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			if lo, hi := IntRange(tt.give); lo != tt.wantLo || hi != tt.wantHi {
				t.Fatalf("IntRange(%q) = %d, %d; want %d, %d", tt.give, lo, hi, tt.wantLo, tt.wantHi)
			}
		})
	}
}
