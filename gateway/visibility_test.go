package gateway

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// TestPassiveListingVisibleOnlyToItsFirm: firm 1 reads its passive
// listing by both forms; to firm 2 it looks, by both forms and cold or
// cached, exactly like a listing that does not exist, so its existence
// does not leak. Firm 2 reads firm 1's active listing.
func TestPassiveListingVisibleOnlyToItsFirm(t *testing.T) {
	f := newFixture(t)
	owner, other := bearer(t, 1, 1), bearer(t, 2, 3)
	if resp, body := f.get(t, "/realty/1", other); resp.StatusCode != http.StatusOK {
		t.Fatalf("firm 2 cannot read an active listing: %d %s", resp.StatusCode, body)
	}
	unknown := map[string]string{}
	unknownHeaders := map[string][]string{}
	for _, path := range []string{"/realty/999", "/realty/1-999"} {
		resp, body := f.get(t, path, other)
		p := requireProblem(t, resp, body, http.StatusNotFound)
		unknown[path], unknownHeaders[path] = problemWithoutInstance(t, p, path), stableHeaderLines(resp)
	}
	tests := []struct {
		name    string
		give    string
		owner   bool   // its own firm reads it, so it is cached after
		unknown string // the unknown listing of the same form
	}{
		{name: "other firm by id, cold", give: "/realty/2", unknown: "/realty/999"},
		{name: "other firm by number, cold", give: "/realty/1-2", unknown: "/realty/1-999"},
		{name: "own firm by id", give: "/realty/2", owner: true},
		{name: "other firm by id, cached", give: "/realty/2", unknown: "/realty/999"},
		{name: "own firm by number", give: "/realty/1-2", owner: true},
		{name: "other firm by number, cached", give: "/realty/1-2", unknown: "/realty/1-999"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.owner {
				if resp, body := f.get(t, tt.give, owner); resp.StatusCode != http.StatusOK {
					t.Fatalf("the owner cannot read it: %d %s", resp.StatusCode, body)
				}
				return
			}
			resp, body := f.get(t, tt.give, other)
			p := requireProblem(t, resp, body, http.StatusNotFound)
			if got := problemWithoutInstance(t, p, tt.give); got != unknown[tt.unknown] {
				t.Fatalf("body %s differs from an unknown listing's %s", got, unknown[tt.unknown])
			}
			if got := stableHeaderLines(resp); !reflect.DeepEqual(got, unknownHeaders[tt.unknown]) {
				t.Fatalf("headers %q differ from an unknown listing's %q", got, unknownHeaders[tt.unknown])
			}
			if strings.Contains(body, "passive") {
				t.Fatalf("the body leaks the listing: %s", body)
			}
		})
	}
}
