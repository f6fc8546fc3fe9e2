package upstream

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Limits of a listing body.
const (
	MaxTitleRunes       = 200
	MaxDescriptionRunes = 10_000
	MaxNoteRunes        = 2_000
	MaxTextRunes        = 1_000 // any other string member
	MaxFiles            = 100
	// MaxNumber bounds listing ids and numbers: 2^53-1, the largest
	// integer a JavaScript client holds exactly. Zero means "assign one".
	MaxNumber = 1<<53 - 1
	// MaxFileID leaves room to number the files given without an id.
	MaxFileID = MaxNumber
)

// IntRange returns the bounds of the integer member at path, such as "no"
// or "realtyFiles[0].id". Ids and numbers also take 0, meaning "assign
// one"; any other integer member takes every int64.
func IntRange(path string) (lo, hi int64) {
	switch indices.ReplaceAllString(path, "[]") {
	case "id", "no":
		return 1, MaxNumber
	case "realtyFiles[].id":
		return 1, MaxFileID
	default:
		return math.MinInt64, math.MaxInt64
	}
}

// indices matches the array indices of a member's path.
var indices = regexp.MustCompile(`\[[0-9]+\]`)

// CheckNumber returns a *ValidationError for field, an id or number such as
// "no" or "realtyFiles[0].id", unless v is 0 ("assign one") or within its
// IntRange; else nil.
func CheckNumber(field string, v int64) error {
	if lo, hi := IntRange(field); v != 0 && (v < lo || v > hi) {
		return Invalid(field, outOfRange(lo, hi))
	}
	return nil
}

// Enumerations of the spec.
const (
	imageTypes     = "IMAGE, REALTY_IMAGE_360, VIDEO"
	fileStatuses   = "APPROVED"
	statusApproved = "APPROVED"
)

func validImageType(s string) bool {
	return s == "IMAGE" || s == "REALTY_IMAGE_360" || s == "VIDEO"
}

func validFileStatus(s string) bool { return s == statusApproved }

// DecodeListing parses a listing body strictly: unknown members and wrong
// types are reported for every member, not just the first. Top-level
// latitude, longitude and nearLocation move into location; isActive
// defaults to true and a file's status to APPROVED. With keepServerSet
// (imports) the server-set members are taken from the body, else ignored.
// The result is validated; a bad body returns a *ValidationError.
func DecodeListing(body []byte, keepServerSet bool) (Listing, error) {
	if !json.Valid(body) {
		return Listing{}, Invalid("", "the body must be a JSON object")
	}
	return decodeListing(body, keepServerSet)
}

// DecodeValidListing is DecodeListing for a value that encoding/json has
// checked already, such as the json.RawMessage a json.Decoder returns: it
// skips the check, a pass over every byte. Given anything else it still
// returns a listing or an error, but which is undefined.
func DecodeValidListing(body json.RawMessage, keepServerSet bool) (Listing, error) {
	return decodeListing(body, keepServerSet)
}

// memberArenas keeps the decoders' member buffers between documents.
var memberArenas = sync.Pool{New: func() any { return new([]member) }}

func decodeListing(body []byte, keepServerSet bool) (Listing, error) {
	l := Listing{IsActive: true}
	lv := reflect.ValueOf(&l).Elem()
	d := decoder{noun: "a listing", intRange: IntRange}
	arena := memberArenas.Get().(*[]member)
	defer func() {
		clear(d.members[:cap(d.members)]) // nothing of body stays reachable
		*arena = d.members[:0]
		memberArenas.Put(arena)
	}()
	top, ok := splitObject(body, fieldsOf(lv.Type()), *arena)
	if !ok {
		d.members = *arena
		return Listing{}, Invalid("", "the body must be a JSON object")
	}
	d.members = top
	var coords struct {
		Latitude     *float64 `json:"latitude"`
		Longitude    *float64 `json:"longitude"`
		NearLocation *bool    `json:"nearLocation"`
	}
	own := top[:0]
	for _, m := range top {
		switch m.name {
		case "latitude", "longitude", "nearLocation":
			d.object([]member{m}, reflect.ValueOf(&coords).Elem())
		// The members the server assigns: a write body may carry them (a
		// GET-then-PUT round trip); they are ignored unless kept, and
		// listingId, made of firmId and no, always.
		case "listingId":
		case "id", "firmId", "firmUserId", "createdDate", "updatedDate":
			if keepServerSet {
				own = append(own, m)
			}
		default:
			own = append(own, m)
		}
	}
	d.object(own, lv)
	move(&d, "latitude", coords.Latitude, &l.Location.Latitude)
	move(&d, "longitude", coords.Longitude, &l.Location.Longitude)
	move(&d, "nearLocation", coords.NearLocation, &l.Location.NearLocation)
	for i := range l.RealtyFiles {
		if l.RealtyFiles[i].Status == nil {
			approved := statusApproved
			l.RealtyFiles[i].Status = &approved
		}
	}
	errs := d.errs
	for _, f := range l.validate() {
		if !reportedUnder(d.errs, f.Field) {
			errs = append(errs, f)
		}
	}
	if len(errs) > 0 {
		slices.SortFunc(errs, func(a, b FieldError) int { return strings.Compare(a.Field, b.Field) })
		return Listing{}, &ValidationError{Fields: errs}
	}
	return l, nil
}

// reportedUnder reports whether field or one of its parents already failed
// to decode, which makes further messages about it noise.
func reportedUnder(errs []FieldError, field string) bool {
	for _, e := range errs {
		if field == e.Field || strings.HasPrefix(field, e.Field+".") || strings.HasPrefix(field, e.Field+"[") {
			return true
		}
	}
	return false
}

// move puts a top-level coordinate into location; given in both places it
// is ambiguous.
func move[T any](d *decoder, name string, top *T, inLocation **T) {
	switch {
	case top == nil:
	case *inLocation != nil:
		d.errs = append(d.errs, FieldError{Field: name, Message: "is also given as location." + name + "; give it once, in location"})
	default:
		*inLocation = top
	}
}

// validate checks what types cannot: required members, ranges, enums and
// sizes.
func (l *Listing) validate() []FieldError {
	var c checks
	l.checkRequired(&c)
	l.checkRanges(&c)
	l.checkTexts(&c)
	l.checkFiles(&c)
	return c.errs
}

// checks collects the faults that validate finds, in the order found.
type checks struct{ errs []FieldError }

func (c *checks) fail(field, format string, args ...any) {
	c.errs = append(c.errs, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// number checks an id or number of IntRange [1, hi], 0 meaning "assign
// one", as CheckNumber does; field is named only on a fault.
func (c *checks) number(field func() string, v, hi int64) {
	if v != 0 && (v < 1 || v > hi) {
		c.errs = append(c.errs, FieldError{Field: field(), Message: outOfRange(1, hi)})
	}
}

// text checks that s, where given, has at most limit characters.
func (c *checks) text(field string, s *string, limit int) {
	if s != nil && utf8.RuneCountInString(*s) > limit {
		c.fail(field, "must be at most %d characters", limit)
	}
}

// checkRequired checks the members a listing must have: a title within
// its size, a category and a city.
func (l *Listing) checkRequired(c *checks) {
	switch {
	case strings.TrimSpace(l.Title) == "":
		c.fail("title", "is required")
	case utf8.RuneCountInString(l.Title) > MaxTitleRunes:
		c.fail("title", "must be at most %d characters", MaxTitleRunes)
	}
	if l.CategoryID == nil {
		c.fail("categoryId", "is required")
	}
	if l.Location.CityID == nil {
		c.fail("location.cityId", "is required")
	}
}

// checkRanges checks the coordinates, the id and the number.
func (l *Listing) checkRanges(c *checks) {
	if lat := l.Location.Latitude; lat != nil && (*lat < -90 || *lat > 90) {
		c.fail("location.latitude", "must be within [-90, 90]")
	}
	if lon := l.Location.Longitude; lon != nil && (*lon < -180 || *lon > 180) {
		c.fail("location.longitude", "must be within [-180, 180]")
	}
	c.number(func() string { return "id" }, l.ID, MaxNumber) // non-zero in imports only
	c.number(func() string { return "no" }, l.No, MaxNumber)
}

// checkTexts checks the sizes of the string members but the title and
// the files' URLs.
func (l *Listing) checkTexts(c *checks) {
	c.text("note", l.Note, MaxNoteRunes)
	c.text("attributes.title", l.Attributes.Title, MaxTitleRunes)
	c.text("attributes.description", l.Attributes.Description, MaxDescriptionRunes)
	c.text("attributes.note", l.Attributes.Note, MaxNoteRunes)
	for _, t := range [...]struct {
		field string
		s     *string
	}{
		{"realtyDetailUrl", l.RealtyDetailURL}, {"realtyIdentificationNo", l.RealtyIdentificationNo},
		{"energyDocumentNo", l.EnergyDocumentNo}, {"location.cityName", l.Location.CityName},
		{"location.countyName", l.Location.CountyName}, {"location.districtName", l.Location.DistrictName},
		{"attributes.housingComplexName", l.Attributes.HousingComplexName},
		{"attributes.priceCurrencyType", l.Attributes.PriceCurrencyType},
		{"attributes.feeCurrencyType", l.Attributes.FeeCurrencyType},
		{"attributes.rentalCurrencyType", l.Attributes.RentalCurrencyType},
		{"attributes.depositCurrencyType", l.Attributes.DepositCurrencyType},
	} {
		c.text(t.field, t.s, MaxTextRunes)
	}
}

// checkFiles checks the files: their count, and each one's enums, id and
// URL.
func (l *Listing) checkFiles(c *checks) {
	if len(l.RealtyFiles) > MaxFiles {
		c.fail("realtyFiles", "must have at most %d items", MaxFiles)
	}
	for i, f := range l.RealtyFiles {
		field := func(member string) string { return "realtyFiles[" + strconv.Itoa(i) + "]." + member }
		if f.ImageType != nil && !validImageType(*f.ImageType) {
			c.fail(field("imageType"), "must be one of %s", imageTypes)
		}
		if f.Status != nil && !validFileStatus(*f.Status) {
			c.fail(field("status"), "must be one of %s", fileStatuses)
		}
		c.number(func() string { return field("id") }, f.ID, MaxFileID)
		if f.ImageURL != nil && utf8.RuneCountInString(*f.ImageURL) > MaxTextRunes {
			c.text(field("imageUrl"), f.ImageURL, MaxTextRunes)
		}
	}
}
