package gateway

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
)

// FuzzParseRef checks that parseRef never panics and accepts only the
// canonical forms: formatting the key it returns gives back the input
// exactly, so "007", "+5", "５" or "5\x00" can never name listing 5.
func FuzzParseRef(f *testing.F) {
	for _, seed := range []string{
		"1", "12-34", "007", "-5", "+5", "12-", "9223372036854775807", "9223372036854775808",
		"５", "5\x00", "1-2-3", "", "0", "-", "1-0", "0-1", "-12", "1e3", "0x10", "5 ", " 5", "5\r\n",
		"9223372036854775807-9223372036854775807", "1-9223372036854775808",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		key, ok := ParseRef(ref)
		if !ok {
			return
		}
		var formatted string
		switch {
		case key.ID != 0:
			if key.ID <= 0 || key.FirmID != 0 || key.No != 0 {
				t.Fatalf("ParseRef(%q) = %+v: an id key must have only a positive ID", ref, key)
			}
			formatted = strconv.FormatInt(key.ID, 10)
		default:
			if key.FirmID <= 0 || key.No <= 0 {
				t.Fatalf("ParseRef(%q) = %+v: a number key must have a positive firm and no", ref, key)
			}
			formatted = strconv.FormatInt(key.FirmID, 10) + "-" + strconv.FormatInt(key.No, 10)
		}
		if formatted != ref {
			t.Fatalf("ParseRef(%q) = %+v, which formats as %q: a non-canonical form was accepted", ref, key, formatted)
		}
	})
}

// FuzzDecodeLogin checks that decodeLogin never panics, that what it
// accepts satisfies the login handler's preconditions, and that every
// rejection is a 400 problem (never a 500 through the error handler).
func FuzzDecodeLogin(f *testing.F) {
	for _, seed := range []string{
		`{"email":"pw@one.example","password":"correct horse battery staple","key":"test-api-key-of-firm-one"}`,
		`{"email":"otp@one.example","key":"k"}`,
		`{"email":" ","key":"k"}`,
		`{"email":"a","key":""}`,
		`{"email":"a","key":"k","password":"` + strings.Repeat("p", maxPasswordBytes+1) + `"}`,
		`{"email":"a","key":"k","password":"` + strings.Repeat("p", maxPasswordBytes) + `"}`,
		`{"email":"a","key":"k"} {"email":"b","key":"k"}`,
		`{"email":"a","key":"k"}}`,
		`{"email":1,"key":"k"}`,
		`{"EMAIL":"a","Key":"k"}`,
		`{"email":"\u00e9\ud800","key":"\u0000"}`,
		`[]`, `null`, `""`, ``, `{`, "\xff",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeLogin(body)
		if err != nil {
			var p *problem
			if !errors.As(err, &p) || p.status != fiber.StatusBadRequest {
				t.Fatalf("decodeLogin(%q) error %#v, want a 400 *problem", body, err)
			}
			if status, _ := statusOf(err); status != fiber.StatusBadRequest {
				t.Fatalf("decodeLogin(%q) error maps to %d, want 400", body, status)
			}
			return
		}
		if strings.TrimSpace(req.Email) == "" {
			t.Fatalf("decodeLogin(%q) accepted a blank email %q", body, req.Email)
		}
		if req.Key == "" {
			t.Fatalf("decodeLogin(%q) accepted an empty key", body)
		}
		if len(req.Password) > maxPasswordBytes {
			t.Fatalf("decodeLogin(%q) accepted a %d-byte password", body, len(req.Password))
		}
	})
}
