package gateway

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/realty-gateway/gateway/upstream"
)

// TestCreateNumberLimits walks a firm up to the largest listing number over
// HTTP. The steps run in order, on one store.
func TestCreateNumberLimits(t *testing.T) {
	f := newFixture(t)
	auth := bearer(t, 1, 1)
	const (
		outOfRange = "is out of range: must be within [1, 9007199254740991]"
		outOfInt64 = "is out of range: must be within [-9223372036854775808, 9223372036854775807]"
	)
	body := func(members string) string {
		return `{"title":"x","categoryId":1,"location":{"cityId":1}` + members + `}`
	}
	tests := []struct {
		name          string
		give          string
		wantStatus    int
		wantListingID string                // on 201
		wantErrors    []upstream.FieldError // on 422; a message ending in "…" is a prefix
	}{
		{name: "no past the bound", give: body(`,"no":9007199254740992`), wantStatus: 422,
			wantErrors: []upstream.FieldError{{Field: "no", Message: outOfRange}}},
		{name: "no at the int64 maximum", give: body(`,"no":9223372036854775807`), wantStatus: 422,
			wantErrors: []upstream.FieldError{{Field: "no", Message: outOfRange}}},
		{name: "integer past int64", give: `{"title":"x","categoryId":9223372036854775808,"location":{"cityId":1}}`, wantStatus: 422,
			wantErrors: []upstream.FieldError{{Field: "categoryId", Message: outOfInt64}}},
		{name: "fraction", give: `{"title":"x","categoryId":1.5,"location":{"cityId":1}}`, wantStatus: 422,
			wantErrors: []upstream.FieldError{{Field: "categoryId", Message: "must be an integer"}}},
		{name: "largest number", give: body(`,"no":9007199254740991`), wantStatus: 201, wantListingID: "1-9007199254740991"},
		{name: "none left to assign", give: body(``), wantStatus: 422,
			wantErrors: []upstream.FieldError{{Field: "no", Message: "has no free value…"}}},
		{name: "still none left", give: body(`,"no":0`), wantStatus: 422,
			wantErrors: []upstream.FieldError{{Field: "no", Message: "has no free value…"}}},
		{name: "a free number", give: body(`,"no":7`), wantStatus: 201, wantListingID: "1-7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, got := f.send(t, http.MethodPost, "/realty", auth, tt.give)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.wantStatus, got)
			}
			if tt.wantStatus == http.StatusCreated {
				if id := decode(t, got)["listingId"]; id != tt.wantListingID {
					t.Fatalf("listingId %v, want %s", id, tt.wantListingID)
				}
				view, _ := f.get(t, "/realty/"+tt.wantListingID, auth)
				if view.StatusCode != http.StatusOK {
					t.Fatalf("GET /realty/%s: status %d", tt.wantListingID, view.StatusCode)
				}
				return
			}
			var problem struct {
				Errors []upstream.FieldError `json:"errors"`
			}
			if err := json.Unmarshal([]byte(got), &problem); err != nil {
				t.Fatalf("body %s: %v", got, err)
			}
			if !slices.EqualFunc(problem.Errors, tt.wantErrors, func(g, w upstream.FieldError) bool {
				prefix, isPrefix := strings.CutSuffix(w.Message, "…")
				return g.Field == w.Field && (g.Message == w.Message || isPrefix && strings.HasPrefix(g.Message, prefix))
			}) {
				t.Fatalf("errors %+v, want %+v", problem.Errors, tt.wantErrors)
			}
		})
	}
}
