package platform

import "testing"

func TestMaskURLCredentials(t *testing.T) {
	tests := []struct{ give, want string }{
		{give: `failed to send to https://user:s3cret@collector:4318/v1/traces: 401`, want: `failed to send to https://***@collector:4318/v1/traces: 401`},
		{give: `Post "http://tok@c/v1/traces": dial tcp`, want: `Post "http://***@c/v1/traces": dial tcp`},
		{give: `no URL here, a@b`, want: `no URL here, a@b`},
	}
	for _, tt := range tests {
		if got := maskURLCredentials(tt.give); got != tt.want {
			t.Errorf("maskURLCredentials(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
}
