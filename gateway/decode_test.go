package gateway

import "testing"

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
