package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

const newListing = `{"title":"New flat","categoryId":3,"location":{"cityId":6,"latitude":39.9},"firmId":99,"firmUserId":99,"id":99}`

func TestCreate(t *testing.T) {
	f := newFixture(t)
	auth := bearer(t, 1, 2) // the passwordless user of firm 1
	resp, body := f.send(t, http.MethodPost, "/realty", auth, newListing)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	got := decode(t, body)
	if got["firmId"] != 1.0 || got["firmUserId"] != 2.0 || got["id"] == 99.0 || got["no"] != 3.0 || got["listingId"] != "1-3" {
		t.Fatalf("created %v: firm and user must come from the token, id and no from the server", got)
	}
	if loc := resp.Header.Get("Location"); loc != "/realty/"+jsonNumber(int64(got["id"].(float64))) {
		t.Fatalf("Location = %q", loc)
	}
	if got["createdDate"].(float64) <= 0 || got["updatedDate"] != got["createdDate"] {
		t.Fatalf("dates %v %v", got["createdDate"], got["updatedDate"])
	}
	view, viewBody := f.get(t, resp.Header.Get("Location"), auth)
	if view.StatusCode != 200 || viewBody != body || view.Header.Get("X-Cache") != "HIT" {
		t.Fatalf("read after create: %d %s %s", view.StatusCode, view.Header.Get("X-Cache"), viewBody)
	}

	resp, body = f.send(t, http.MethodPost, "/realty", auth, `{"title":"Taken","no":3,"categoryId":1,"location":{"cityId":1}}`)
	if resp.StatusCode != http.StatusConflict || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("taken no: %d %s", resp.StatusCode, body)
	}
	resp, body = f.send(t, http.MethodPost, "/realty", auth, `{"title":"Free","no":40,"categoryId":1,"location":{"cityId":1}}`)
	if resp.StatusCode != http.StatusCreated || decode(t, body)["no"] != 40.0 {
		t.Fatalf("free no: %d %s", resp.StatusCode, body)
	}
}

func TestWriteValidation(t *testing.T) {
	f := newFixture(t)
	auth := bearer(t, 1, 1)
	tests := []struct {
		name       string
		method     string
		path       string
		give       string
		wantStatus int
		wantFields []string
	}{
		{name: "missing required", method: "POST", path: "/realty", give: `{}`, wantStatus: 422, wantFields: []string{"categoryId", "location.cityId", "title"}},
		{name: "wrong types", method: "POST", path: "/realty", give: `{"title":1,"categoryId":"x","location":{"cityId":true}}`, wantStatus: 422, wantFields: []string{"categoryId", "location.cityId", "title"}},
		{name: "ranges", method: "POST", path: "/realty", give: `{"title":"x","categoryId":1,"location":{"cityId":1,"latitude":91,"longitude":181}}`, wantStatus: 422, wantFields: []string{"location.latitude", "location.longitude"}},
		{name: "enums", method: "POST", path: "/realty", give: `{"title":"x","categoryId":1,"location":{"cityId":1},"realtyFiles":[{"imageType":"PDF"}]}`, wantStatus: 422, wantFields: []string{"realtyFiles[0].imageType"}},
		{name: "sizes", method: "POST", path: "/realty", give: `{"title":"` + strings.Repeat("t", 201) + `","categoryId":1,"location":{"cityId":1}}`, wantStatus: 422, wantFields: []string{"title"}},
		{name: "unknown member", method: "POST", path: "/realty", give: `{"title":"x","categoryId":1,"location":{"cityId":1},"price":5}`, wantStatus: 422, wantFields: []string{"price"}},
		{name: "not JSON", method: "POST", path: "/realty", give: `{"title":`, wantStatus: 400},
		{name: "not an object", method: "POST", path: "/realty", give: `[1]`, wantStatus: 422, wantFields: []string{""}},
		{name: "unbounded currency", method: "POST", path: "/realty", give: `{"title":"x","categoryId":1,"location":{"cityId":1},"attributes":{"priceCurrencyType":"` + strings.Repeat("T", 1001) + `"}}`, wantStatus: 422, wantFields: []string{"attributes.priceCurrencyType"}},
		{name: "PUT cannot change no", method: "PUT", path: "/realty/1", give: `{"title":"x","no":5,"categoryId":1,"location":{"cityId":1}}`, wantStatus: 422, wantFields: []string{"no"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := f.send(t, tt.method, tt.path, auth, tt.give)
			if resp.StatusCode != tt.wantStatus || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.wantStatus, body)
			}
			var problem struct {
				Errors []struct{ Field string } `json:"errors"`
			}
			_ = json.Unmarshal([]byte(body), &problem)
			var got []string
			for _, e := range problem.Errors {
				got = append(got, e.Field)
			}
			if !slices.Equal(got, tt.wantFields) {
				t.Fatalf("fields %q, want %q", got, tt.wantFields)
			}
		})
	}
	req := httptest.NewRequest(http.MethodPost, "/realty", strings.NewReader(newListing))
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "text/plain")
	if resp, _ := f.do(t, req); resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("text/plain body: %d, want 415", resp.StatusCode)
	}
}

func TestReplaceAndDelete(t *testing.T) {
	f := newFixture(t)
	owner := bearer(t, 1, 2)
	other := bearer(t, 2, 3)

	// A GET-then-PUT round trip works, and keeps no and firmUserId.
	_, original := f.get(t, "/realty/1-1", owner)
	edited := strings.Replace(original, `"title":"active"`, `"title":"edited"`, 1)
	resp, body := f.send(t, http.MethodPut, "/realty/1-1", owner, edited)
	if resp.StatusCode != 200 {
		t.Fatalf("PUT: %d %s", resp.StatusCode, body)
	}
	got, was := decode(t, body), decode(t, original)
	if got["title"] != "edited" || got["no"] != was["no"] || got["firmUserId"] != was["firmUserId"] || got["createdDate"] != was["createdDate"] {
		t.Fatalf("PUT result %v", got)
	}
	if got["updatedDate"].(float64) <= was["updatedDate"].(float64) {
		t.Fatalf("updatedDate %v not after %v", got["updatedDate"], was["updatedDate"])
	}
	for _, path := range []string{"/realty/1", "/realty/1-1"} {
		if _, b := f.get(t, path, owner); !strings.Contains(b, `"title":"edited"`) {
			t.Fatalf("%s after PUT: %s", path, b)
		}
	}

	// Other firms get 404 for writes, by both forms, and change nothing.
	for _, tt := range []struct{ method, path string }{
		{"PUT", "/realty/1"}, {"PUT", "/realty/1-1"}, {"DELETE", "/realty/1"}, {"DELETE", "/realty/1-1"},
	} {
		if resp, body := f.send(t, tt.method, tt.path, other, edited); resp.StatusCode != 404 {
			t.Fatalf("%s %s by another firm: %d %s", tt.method, tt.path, resp.StatusCode, body)
		}
	}
	if resp, _ := f.get(t, "/realty/1", owner); resp.StatusCode != 200 {
		t.Fatal("another firm's DELETE removed the listing")
	}

	if resp, body := f.send(t, http.MethodDelete, "/realty/1", owner, ""); resp.StatusCode != 204 || body != "" {
		t.Fatalf("DELETE: %d %q", resp.StatusCode, body)
	}
	for _, path := range []string{"/realty/1", "/realty/1-1"} {
		if resp, _ := f.get(t, path, owner); resp.StatusCode != 404 {
			t.Fatalf("%s after DELETE: %d", path, resp.StatusCode)
		}
	}
	if resp, _ := f.send(t, http.MethodDelete, "/realty/1", owner, ""); resp.StatusCode != 404 {
		t.Fatalf("second DELETE: %d", resp.StatusCode)
	}
}
