package upstream

import (
	"encoding/json"
	"reflect"
	"slices"
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
	var members map[string]json.RawMessage
	body := `{"name":null,"count":99999999999999999999,"note":null,"extra":1,"items":[{"on":true},{"on":"yes"}]}`
	if err := json.Unmarshal([]byte(body), &members); err != nil {
		t.Fatal(err)
	}
	d := decoder{noun: "a thing", intRange: func(string) (int64, int64) { return 1, 9 }}
	d.object(members, reflect.ValueOf(&v).Elem(), "")
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
