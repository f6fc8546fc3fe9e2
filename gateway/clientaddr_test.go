package gateway

import (
	"testing"
	"time"
)

// TestClientAddress: the per-address login limit, one login here, counts
// the peer, or behind trusted proxies the right-most X-Forwarded-For hop
// that is not one. The test's peer is 0.0.0.0.
func TestClientAddress(t *testing.T) {
	peer := []string{"0.0.0.0/32"}
	tests := []struct {
		name    string
		trusted []string
		prefix  int
		give    [][]string // X-Forwarded-For lines of consecutive logins
		want    []int
	}{
		{name: "untrusted peer: the header is ignored",
			give: [][]string{{"10.0.0.1"}, {"10.0.0.2"}}, want: []int{200, 429}},
		{name: "trusted peer: each client counts on its own", trusted: []string{"0.0.0.0/8"},
			give: [][]string{{"10.0.0.1"}, {"10.0.0.2"}, {"10.0.0.1"}}, want: []int{200, 200, 429}},
		{name: "spoofed left-most hops do not help", trusted: []string{"0.0.0.0/8"},
			give: [][]string{{"1.1.1.1, 10.0.0.9"}, {"2.2.2.2, 10.0.0.9"}}, want: []int{200, 429}},
		{name: "lines are joined in order: the proxy's appended line counts", trusted: peer,
			give: [][]string{{"6.6.6.6", "7.7.7.7"}, {"5.5.5.5", "7.7.7.7"}}, want: []int{200, 429}},
		{name: "ports are stripped", trusted: peer,
			give: [][]string{{"7.7.7.7:4711"}, {"8.8.8.8:1"}, {"7.7.7.7:4712"}}, want: []int{200, 200, 429}},
		{name: "bracketed IPv6 with a port", trusted: peer,
			give: [][]string{{"[2001:db8:1::1]:443"}, {"2001:db8:2::1"}, {"2001:db8:1::2"}}, want: []int{200, 200, 429}},
		{name: "IPv6 counts per /64", trusted: peer,
			give: [][]string{{"2001:db8::1"}, {"2001:db8:0:1::1"}, {"2001:db8::ffff:1"}}, want: []int{200, 200, 429}},
		{name: "IPv6 prefix is configurable", trusted: peer, prefix: 128,
			give: [][]string{{"2001:db8::1"}, {"2001:db8::2"}, {"2001:db8::1"}}, want: []int{200, 200, 429}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixtureWith(t, func(c *Config) {
				c.TrustedProxies = tt.trusted
				c.Login.IPAttempts, c.Login.LimitPeriod = 1, time.Hour
				if tt.prefix != 0 {
					c.Login.IPv6Prefix = tt.prefix
				}
			}, NoPurge{})
			for i, lines := range tt.give {
				resp, body := f.loginFrom(t, loginBody("otp@one.example", "", testKey), lines...)
				if resp.StatusCode != tt.want[i] {
					t.Fatalf("login %d (X-Forwarded-For %q): status %d, want %d: %s", i, lines, resp.StatusCode, tt.want[i], body)
				}
			}
		})
	}
}
