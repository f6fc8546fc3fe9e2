package upstream

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeListing checks that DecodeListing never panics, that what it
// accepts keeps the listing invariants, that a listing it accepts survives
// its own JSON response (the GET-then-PUT and export-then-import round
// trips), and that everything it refuses is a *ValidationError naming at
// least one field.
func FuzzDecodeListing(f *testing.F) {
	for _, seed := range []string{
		validBody,
		`{}`,
		`{"id":9,"listingId":"1-2","firmId":3,"firmUserId":4,"createdDate":5,"updatedDate":6,"no":7,"title":"x","categoryId":1,` +
			`"latitude":41.5,"longitude":29.1,"nearLocation":true,"location":{"cityId":34},"realtyFiles":[{"imageUrl":"u"},{"id":7,"status":"APPROVED"}],` +
			`"attributes":{"price":1.5,"sideIdList":[1,2],"selectedAttributeList":[{"groupId":1,"selectedIds":[2,3]},{"groupId":2}]}}`,
		`{"title":{"a":[1,{"b":null}]},"categoryId":[1],"location":{"cityId":{"x":1}},"realtyFiles":{"id":1},"attributes":[]}`,
		`{"title":"x","categoryId":1,"location":{"cityId":1},"attributes":{"selectedAttributeList":[{"groupId":"1","selectedIds":[null,1.5]}]},"realtyFiles":[null,1,"x"]}`,
		`{"title":"x","categoryId":9223372036854775807,"no":9223372036854775807,"location":{"cityId":1,"latitude":90,"longitude":-180},"endDate":-9223372036854775808}`,
		`{"title":"x","categoryId":9223372036854775808,"location":{"cityId":1e3,"latitude":1e400},"attributes":{"price":1.7976931348623157e308,"fee":-0,"sqm":5e-324}}`,
		`{"title":"x","categoryId":1,"location":{"cityId":1},"latitude":-90.0000001,"longitude":180.0000001}`,
		`{"title":"Daire \u015fi\u015fli \ud83c\udfe0 ５ \u0000 \u2028","categoryId":1,"location":{"cityId":34,"cityName":"\u0130stanbul"},"note":"\ud800"}`,
		"{\"title\":\"\xff\xfe\",\"categoryId\":1,\"location\":{\"cityId\":1}}",
		`{"title":"` + strings.Repeat("é", MaxTitleRunes) + `","categoryId":1,"location":{"cityId":1}}`,
		`{"Title":"x","categoryId":1,"location":{"cityId":1},"title":"y","title":"z"}`,
		`{"title":"x","categoryId":1,"location":{"cityId":1},"isActive":null,"realtyFiles":null,"note":null}`,
		`null`, `[]`, `"x"`, `1`, ``, `{"title":`, `{"a":1} {}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, keep := range []bool{false, true} {
			l, err := DecodeListing(body, keep)
			if err != nil {
				fuzzCheckRefusal(t, body, keep, l, err)
				continue
			}
			fuzzCheckListing(t, body, keep, l)
			fuzzCheckRoundTrip(t, body, keep, l)
		}
	})
}

func fuzzCheckRefusal(t *testing.T, body []byte, keep bool, l Listing, err error) {
	t.Helper()
	var ve *ValidationError
	if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("DecodeListing(%q, %v) error %#v, want a *ValidationError", body, keep, err)
	}
	if len(ve.Fields) == 0 {
		t.Fatalf("DecodeListing(%q, %v): a ValidationError without fields", body, keep)
	}
	if !slices.IsSortedFunc(ve.Fields, func(a, b FieldError) int { return strings.Compare(a.Field, b.Field) }) {
		t.Fatalf("DecodeListing(%q, %v): fields not sorted: %v", body, keep, ve.Fields)
	}
	for _, fe := range ve.Fields {
		if fe.Message == "" {
			t.Fatalf("DecodeListing(%q, %v): field %q without a message", body, keep, fe.Field)
		}
	}
	if !reflect.ValueOf(l).IsZero() {
		t.Fatalf("DecodeListing(%q, %v) returned a listing with its error: %+v", body, keep, l)
	}
}

func fuzzCheckListing(t *testing.T, body []byte, keep bool, l Listing) {
	t.Helper()
	fail := func(what string) {
		t.Helper()
		t.Fatalf("DecodeListing(%q, %v) accepted a listing with %s: %+v", body, keep, what, l)
	}
	switch {
	case l.Title == "":
		fail("no title")
	case utf8.RuneCountInString(l.Title) > MaxTitleRunes:
		fail("a too long title")
	case l.CategoryID == nil:
		fail("no categoryId")
	case l.Location.CityID == nil:
		fail("no location.cityId")
	case l.Location.Latitude != nil && (*l.Location.Latitude < -90 || *l.Location.Latitude > 90):
		fail("latitude out of range")
	case l.Location.Longitude != nil && (*l.Location.Longitude < -180 || *l.Location.Longitude > 180):
		fail("longitude out of range")
	case len(l.RealtyFiles) > MaxFiles:
		fail("too many files")
	case l.No < 0 || l.No > MaxNumber:
		fail("a no out of range")
	case l.ID < 0 || l.ID > MaxNumber:
		fail("an id out of range")
	case l.ListingID != "":
		fail("a listingId from the body")
	case !keep && (l.ID != 0 || l.FirmID != 0 || l.FirmUserID != 0 || l.CreatedDate != 0 || l.UpdatedDate != 0):
		fail("server-set members from a write body")
	}
	for i, file := range l.RealtyFiles {
		if file.Status == nil || *file.Status != "APPROVED" {
			fail("a file status other than APPROVED at realtyFiles[" + strconv.Itoa(i) + "]")
		}
	}
	if errs := l.validate(); len(errs) > 0 {
		t.Fatalf("DecodeListing(%q, %v) accepted a listing that fails validate: %v", body, keep, errs)
	}
}

// fuzzCheckRoundTrip re-decodes the listing's own JSON: as it was decoded it
// must come back identical, and in its normalized response shape (what a
// store returns) it must be accepted both as an import and as a write body.
func fuzzCheckRoundTrip(t *testing.T, body []byte, keep bool, l Listing) {
	t.Helper()
	out, err := json.Marshal(l)
	if err != nil {
		t.Fatalf("DecodeListing(%q, %v): marshal: %v", body, keep, err)
	}
	back, err := DecodeListing(out, true)
	if err != nil {
		t.Fatalf("DecodeListing(%q, %v): its own JSON %s is refused: %v", body, keep, out, err)
	}
	if !reflect.DeepEqual(back, l) {
		t.Fatalf("DecodeListing(%q, %v): round trip through %s changed\n%+v\ninto\n%+v", body, keep, out, l, back)
	}

	// Normalize mutates the files in place, so it runs on the copy that
	// came back, which shares nothing with l.
	back.Normalize()
	normal, err := json.Marshal(back)
	if err != nil {
		t.Fatalf("DecodeListing(%q, %v): marshal normalized: %v", body, keep, err)
	}
	for _, keepAgain := range []bool{true, false} {
		again, err := DecodeListing(normal, keepAgain)
		if err != nil {
			t.Fatalf("DecodeListing(%q, %v): its normalized response %s is refused (keepServerSet %v): %v", body, keep, normal, keepAgain, err)
		}
		if keepAgain {
			again.Normalize()
			if !reflect.DeepEqual(again, back) {
				t.Fatalf("DecodeListing(%q, %v): normalized round trip through %s changed\n%+v\ninto\n%+v", body, keep, normal, back, again)
			}
		}
	}
}
