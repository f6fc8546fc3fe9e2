package upstream

import (
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The decoder knows nothing of listings: any struct with json tags will do.
func TestDecoderReportsEveryBadMember(t *testing.T) {
	var v struct {
		Name  string  `json:"name"`
		Count int64   `json:"count"`
		Note  *string `json:"note"`
		Items []struct {
			On bool `json:"on"`
		} `json:"items"`
	}
	body := `{"name":null,"count":99999999999999999999,"note":null,"extra":1,"items":[{"on":true},{"on":"yes"}]}`
	members, ok := splitObject([]byte(body), nil, nil)
	if !ok {
		t.Fatal("not an object")
	}
	d := decoder{noun: "a thing", intRange: func(string) (int64, int64) { return 1, 9 }}
	d.object(members, reflect.ValueOf(&v).Elem())
	slices.SortFunc(d.errs, func(a, b FieldError) int { return strings.Compare(a.Field, b.Field) })
	want := []FieldError{
		{Field: "count", Message: "is out of range: must be within [1, 9]"},
		{Field: "extra", Message: "is not a member of a thing"},
		{Field: "items[1].on", Message: "must be a boolean"},
		{Field: "name", Message: "must not be null"},
	}
	if !slices.Equal(d.errs, want) {
		t.Fatalf("errors\n%+v\nwant\n%+v", d.errs, want)
	}
	if len(v.Items) != 2 || !v.Items[0].On || v.Note != nil {
		t.Fatalf("decoded %+v", v)
	}
}

// FuzzFastScalar: where the fast path takes a literal, json.Unmarshal
// takes it too, to the same value.
func FuzzFastScalar(f *testing.F) {
	for _, seed := range []string{`"x"`, `""`, `"é ５"`, `"a\"b"`, `"\u00e9"`, "\"\xff\"", "\"a\tb\"", `"a\\b"`,
		`0`, `-0`, `17`, `-9223372036854775808`, `9223372036854775807`, `9223372036854775808`, `1e3`, `1.5`, `-0.0`,
		`1.7976931348623157e308`, `1e400`, `5e-324`, `true`, `false`, `null`, `[]`, ` 1`, `"x" `} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return // DecodeListing hands it only parts of a valid document
		}
		for _, ptr := range []any{new(string), new(int64), new(float64), new(bool)} {
			fast := reflect.New(reflect.TypeOf(ptr).Elem())
			if !fastScalar(raw, fast.Elem()) {
				continue
			}
			slow := reflect.New(reflect.TypeOf(ptr).Elem())
			if err := json.Unmarshal(raw, slow.Interface()); err != nil {
				t.Fatalf("fastScalar took %q as %v; json.Unmarshal refuses it: %v", raw, fast.Elem(), err)
			}
			a, b := fast.Elem().Interface(), slow.Elem().Interface()
			if fa, ok := a.(float64); ok && math.Signbit(fa) != math.Signbit(b.(float64)) || a != b {
				t.Fatalf("fastScalar took %q as %#v; json.Unmarshal as %#v", raw, a, b)
			}
		}
	})
}
