package gateway

import "github.com/valyala/fasthttp"

// A request's field names arrive normalized: fasthttp's parser writes
// them in its canonical form ("X-Request-Id", "Accept-Encoding"), as the
// App leaves DisableHeaderNormalizing off. Peek and PeekAll copy and
// normalize the name they are given on every call, which costs a hit
// more than the lookup itself; these read a name given in canonical form
// as it is.

// requestField returns the value of the request's first field named
// name, which is in canonical form.
func requestField(h *fasthttp.RequestHeader, name string) []byte {
	return h.PeekCanonical([]byte(name))
}

// requestFields appends the values of every request field named name,
// which is in canonical form, to dst. fasthttp's All first parses the
// Cookie field into its cookie list, once per request (linear in the
// field, which the header limit bounds), and moves it out of the plain
// fields: the gateway reads no cookie.
func requestFields(h *fasthttp.RequestHeader, name string, dst [][]byte) [][]byte {
	for k, v := range h.All() {
		if string(k) == name {
			dst = append(dst, v)
		}
	}
	return dst
}
