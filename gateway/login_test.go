package gateway

import (
	"errors"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
)

func TestDecodeLoginRefusesTrailingData(t *testing.T) {
	tests := []struct {
		give   string
		wantOK bool
	}{
		{give: `{"email":"a@b.c","key":"k"}`, wantOK: true},
		{give: `{"email":"a@b.c","key":"k"}  ` + "\n", wantOK: true},
		{give: `{"email":"a@b.c","key":"k"}}`},
		{give: `{"email":"a@b.c","key":"k"}]`},
		{give: `{"email":"a@b.c","key":"k"}{}`},
		{give: `{"email":"a@b.c","key":"k"} x`},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			if _, err := decodeLogin([]byte(tt.give)); (err == nil) != tt.wantOK {
				t.Fatalf("decodeLogin(%q) err = %v, want ok=%v", tt.give, err, tt.wantOK)
			}
		})
	}
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

func TestLongPasswordRejectedBeforeHashing(t *testing.T) {
	f := newFixture(t)
	resp, body := f.login(t, loginBody("pw@one.example", strings.Repeat("p", 1025), testKey), nil)
	if resp.StatusCode != 400 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
}
