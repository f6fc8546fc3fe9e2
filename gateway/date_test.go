package gateway

import (
	"net/http"
	"testing"
	"time"

	"github.com/realty-gateway/gateway/internal/testenv"
)

// startOfASecond returns just after the clock enters a new second, so that
// what follows runs within one second on any but a stalled machine.
func startOfASecond() {
	now := time.Now()
	time.Sleep(now.Truncate(time.Second).Add(time.Second + 5*time.Millisecond).Sub(now))
}

// datesOf returns an answer's Date and its Last-Modified, zero where it
// has none, failing where either does not parse.
func datesOf(t *testing.T, what string, resp *http.Response) (date, lastModified time.Time) {
	t.Helper()
	date, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		t.Fatalf("%s: Date %q: %v", what, resp.Header.Get("Date"), err)
	}
	if lm := resp.Header.Get("Last-Modified"); lm != "" {
		if lastModified, err = http.ParseTime(lm); err != nil {
			t.Fatalf("%s: Last-Modified %q: %v", what, lm, err)
		}
	}
	return date, lastModified
}

// TestLastModifiedNeverAfterDate: every answer carries a Date (RFC 9110
// §6.6.1), and a listing's Last-Modified is never later than it (§8.8.2.1),
// under a burst of writes and reads within one second, whose revisions the
// store dates ahead of the clock. Once the clock reaches the last
// revision's date, its answers carry it.
func TestLastModifiedNeverAfterDate(t *testing.T) {
	f := newFixture(t)
	auth := bearer(t, 1, 1)
	_, body := f.get(t, "/realty/1", auth)
	check := func(what string, resp *http.Response) time.Time {
		t.Helper()
		date, lm := datesOf(t, what, resp)
		if lm.After(date) {
			t.Fatalf("%s: Last-Modified %s is later than Date %s", what, resp.Header.Get("Last-Modified"), resp.Header.Get("Date"))
		}
		return lm
	}
	startOfASecond()
	for i := range 5 {
		resp, got := f.withHeaders(t, http.MethodPut, "/realty/1", auth, body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT %d: %d %s", i, resp.StatusCode, got)
		}
		check("PUT", resp)
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			resp, _ := f.withHeaders(t, method, "/realty/1", auth, "")
			check(method, resp)
			resp, _ = f.withHeaders(t, method, "/realty/1", auth, "", "If-None-Match", resp.Header.Get("ETag"))
			if resp.StatusCode != http.StatusNotModified {
				t.Fatalf("%s If-None-Match: %d; want 304", method, resp.StatusCode)
			}
			check(method+" 304", resp)
		}
	}
	for _, refused := range []struct{ method, path, auth string }{
		{http.MethodGet, "/realty/999", auth}, {http.MethodGet, "/realty/1", ""}, {http.MethodGet, "/realty/x", auth},
		{http.MethodPatch, "/realty/1", auth}, {"FOO", "/realty/1", auth},
	} {
		resp, _ := f.withHeaders(t, refused.method, refused.path, refused.auth, "")
		check(refused.method+" "+refused.path, resp)
	}
	testenv.Eventually(t, "a Last-Modified once the clock reaches the revision's date", func() bool {
		resp, _ := f.get(t, "/realty/1", auth)
		return !check("GET", resp).IsZero()
	})
}

// TestTheDateSentIsTheDateChecked: after two writes within one second,
// the Last-Modified a client receives is the date its preconditions are
// checked against, for as long as the version stands: If-Unmodified-Since
// lets reads and writes go on, If-Modified-Since gives 304, then and two
// seconds later.
func TestTheDateSentIsTheDateChecked(t *testing.T) {
	f := newFixture(t)
	auth := bearer(t, 1, 1)
	_, body := f.get(t, "/realty/1", auth)
	startOfASecond()
	for range 2 {
		if resp, got := f.withHeaders(t, http.MethodPut, "/realty/1", auth, body); resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT: %d %s", resp.StatusCode, got)
		}
	}
	var lm, etag string
	testenv.Eventually(t, "an answer with a Last-Modified", func() bool {
		resp, _ := f.get(t, "/realty/1", auth)
		lm, etag = resp.Header.Get("Last-Modified"), resp.Header.Get("ETag")
		return lm != ""
	})
	revalidate := func(when string) {
		t.Helper()
		for _, tt := range []struct {
			method, field string
			want          int
		}{
			{http.MethodGet, "If-Unmodified-Since", http.StatusOK},
			{http.MethodHead, "If-Unmodified-Since", http.StatusOK},
			{http.MethodGet, "If-Modified-Since", http.StatusNotModified},
			{http.MethodHead, "If-Modified-Since", http.StatusNotModified},
		} {
			resp, got := f.withHeaders(t, tt.method, "/realty/1", auth, "", tt.field, lm)
			if resp.StatusCode != tt.want || resp.Header.Get("ETag") != etag {
				t.Errorf("%s: %s %s: %s: %d, ETag %s; want %d for the version sent with it (%s): %s",
					when, tt.method, tt.field, lm, resp.StatusCode, resp.Header.Get("ETag"), tt.want, etag, got)
			}
		}
	}
	revalidate("at once")
	time.Sleep(2 * time.Second)
	revalidate("two seconds later")
	if resp, got := f.withHeaders(t, http.MethodPut, "/realty/1", auth, body, "If-Unmodified-Since", lm); resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT If-Unmodified-Since %s, the current version's date: %d %s; want 200", lm, resp.StatusCode, got)
	}
}
