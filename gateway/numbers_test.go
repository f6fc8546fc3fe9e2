package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/realty-gateway/gateway/upstream"
)

// TestCreateNumberLimits walks a firm up to the largest listing number over
// HTTP, and auto-numbers after it. The steps run in order, on one store.
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
		// The largest number does not take auto-numbering away from the
		// firm: the counter goes on from where it was (1-1 and 1-2 exist).
		{name: "auto-numbered after the largest", give: body(``), wantStatus: 201, wantListingID: "1-3"},
		{name: "no 0 is auto-numbered too", give: body(`,"no":0`), wantStatus: 201, wantListingID: "1-4"},
		{name: "a free number", give: body(`,"no":6`), wantStatus: 201, wantListingID: "1-6"},
		{name: "auto-numbered past a given one", give: body(``), wantStatus: 201, wantListingID: "1-5"},
		{name: "and the one after it", give: body(``), wantStatus: 201, wantListingID: "1-7"},
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

// TestConcurrentAutoNumberedCreates: after a create with the largest
// number, creates without a number, two at a time, all get 201 and
// numbers that no other listing of the firm has.
func TestConcurrentAutoNumberedCreates(t *testing.T) {
	f := newFixture(t)
	auth := bearer(t, 1, 1)
	body := `{"title":"x","categoryId":1,"location":{"cityId":1}}`
	if resp, got := f.send(t, http.MethodPost, "/realty", auth, `{"title":"x","no":9007199254740991,"categoryId":1,"location":{"cityId":1}}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create with the largest number: %d %s", resp.StatusCode, got)
	}
	seen := map[any]bool{"1-1": true, "1-2": true, "1-9007199254740991": true}
	for round := range 10 {
		var wg sync.WaitGroup
		var ids [2]any
		for i := range ids {
			wg.Go(func() {
				req := httptest.NewRequest(http.MethodPost, "/realty", strings.NewReader(body))
				req.Header.Set("Authorization", auth)
				req.Header.Set("Content-Type", "application/json")
				resp, err := f.app.Test(req, -1)
				if err != nil {
					t.Error(err)
					return
				}
				defer resp.Body.Close()
				var created struct {
					ListingID string `json:"listingId"`
				}
				if err := json.NewDecoder(resp.Body).Decode(&created); err != nil || resp.StatusCode != http.StatusCreated {
					t.Errorf("round %d: status %d, %v", round, resp.StatusCode, err)
					return
				}
				ids[i] = created.ListingID
			})
		}
		wg.Wait()
		for _, id := range ids {
			if id == nil {
				t.FailNow()
			}
			if seen[id] {
				t.Fatalf("round %d: listing number %v given twice", round, id)
			}
			seen[id] = true
		}
	}
}
