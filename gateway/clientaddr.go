package gateway

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// Client addresses, for the per-address login limit: the peer, or behind
// trusted proxies the address they saw in X-Forwarded-For.

// trustedProxies parses the proxies allowed to set X-Forwarded-For: CIDRs
// or single addresses.
func (c Config) trustedProxies() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range c.TrustedProxies {
		s = strings.TrimSpace(s)
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("http.trustedProxies: %q is neither an address nor a CIDR", s)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// clientNetwork names the client for the per-IP login limit: its address,
// or for IPv6 its network of Login.IPv6Prefix bits.
func (s *Server) clientNetwork(c *fiber.Ctx) string {
	addr := s.clientIP(c)
	if addr.Is6() {
		p, err := addr.WithZone("").Prefix(s.cfg.Login.IPv6Prefix)
		if err == nil {
			return p.String()
		}
	}
	return addr.String()
}

// clientIP is the peer's address, or, when the peer is a trusted proxy,
// the right-most address in X-Forwarded-For that is not a trusted proxy:
// left of that, anyone may have written anything. Repeated header lines
// are joined in order (RFC 9110 §5.3), and hops may carry a port.
func (s *Server) clientIP(c *fiber.Ctx) netip.Addr {
	addr, _ := netip.AddrFromSlice(c.Context().RemoteIP())
	addr = addr.Unmap()
	if !s.trusted(addr) {
		return addr
	}
	lines := c.Request().Header.PeekAll(fiber.HeaderXForwardedFor)
	var hops []string
	for _, line := range lines {
		hops = append(hops, strings.Split(string(line), ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		hop, ok := parseHop(strings.TrimSpace(hops[i]))
		if !ok {
			break
		}
		addr = hop
		if !s.trusted(addr) {
			break
		}
	}
	return addr
}

// parseHop reads one X-Forwarded-For hop: an address, an address with a
// port ("203.0.113.5:4711", "[2001:db8::1]:443"), or a bracketed IPv6
// address.
func parseHop(hop string) (netip.Addr, bool) {
	if addr, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(hop, "["), "]")); err == nil {
		return addr.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(hop); err == nil {
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}

func (s *Server) trusted(addr netip.Addr) bool {
	for _, p := range s.proxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}
