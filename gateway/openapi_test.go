package gateway

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
	"go.yaml.in/yaml/v3"

	"github.com/realty-gateway/gateway/coding"
	"github.com/realty-gateway/gateway/upstream"
)

// openAPIDocument is the part of openapi.yaml the tests compare with the
// code.
type openAPIDocument struct {
	OpenAPI    string                     `yaml:"openapi"`
	Paths      map[string]openAPIPathItem `yaml:"paths"`
	Components struct {
		// Headers named with x-every-response are documented once for
		// every answer: OpenAPI has no global response headers.
		Headers    map[string]openAPIHeader    `yaml:"headers"`
		Schemas    map[string]openAPISchema    `yaml:"schemas"`
		Responses  map[string]openAPIResponse  `yaml:"responses"`
		Parameters map[string]openAPIParameter `yaml:"parameters"`
	} `yaml:"components"`
}

type openAPIHeader struct {
	EveryResponse string `yaml:"x-every-response"`
}

type openAPIParameter struct {
	Schema struct {
		OneOf []struct {
			Title   string `yaml:"title"`
			Pattern string `yaml:"pattern"`
		} `yaml:"oneOf"`
	} `yaml:"schema"`
}

type openAPIPathItem struct {
	Get     *openAPIOperation `yaml:"get"`
	Put     *openAPIOperation `yaml:"put"`
	Post    *openAPIOperation `yaml:"post"`
	Delete  *openAPIOperation `yaml:"delete"`
	Options *openAPIOperation `yaml:"options"`
	Head    *openAPIOperation `yaml:"head"`
	Patch   *openAPIOperation `yaml:"patch"`
	Trace   *openAPIOperation `yaml:"trace"`
}

// operations returns the path item's operations by HTTP method.
func (p openAPIPathItem) operations() map[string]*openAPIOperation {
	ops := map[string]*openAPIOperation{}
	for method, op := range map[string]*openAPIOperation{
		http.MethodGet: p.Get, http.MethodPut: p.Put, http.MethodPost: p.Post, http.MethodDelete: p.Delete,
		http.MethodOptions: p.Options, http.MethodHead: p.Head, http.MethodPatch: p.Patch, http.MethodTrace: p.Trace,
	} {
		if op != nil {
			ops[method] = op
		}
	}
	return ops
}

type openAPIOperation struct {
	Responses map[string]openAPIResponse `yaml:"responses"`
}

type openAPIResponse struct {
	Ref     string         `yaml:"$ref"`
	Headers map[string]any `yaml:"headers"`
}

type openAPISchema struct {
	Properties map[string]any `yaml:"properties"`
}

func loadOpenAPI(t *testing.T) openAPIDocument {
	t.Helper()
	b, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPIDocument
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi = %q, want 3.1.0", doc.OpenAPI)
	}
	return doc
}

// response resolves a response of the document, following a $ref into
// components/responses.
func (d openAPIDocument) response(t *testing.T, r openAPIResponse) openAPIResponse {
	t.Helper()
	if r.Ref == "" {
		return r
	}
	name, ok := strings.CutPrefix(r.Ref, "#/components/responses/")
	resolved, found := d.Components.Responses[name]
	if !ok || !found {
		t.Fatalf("unresolvable response $ref %q", r.Ref)
	}
	return resolved
}

// openAPIPath turns a Fiber route path into an OpenAPI path template:
// "/realty/:ref" is "/realty/{ref}".
func openAPIPath(fiberPath string) string {
	segments := strings.Split(fiberPath, "/")
	for i, s := range segments {
		if name, ok := strings.CutPrefix(s, ":"); ok {
			segments[i] = "{" + name + "}"
		}
	}
	return strings.Join(segments, "/")
}

func TestOpenAPIPath(t *testing.T) {
	tests := []struct {
		give string
		want string
	}{
		{give: "/auth/login", want: "/auth/login"},
		{give: "/realty", want: "/realty"},
		{give: "/realty/:ref", want: "/realty/{ref}"},
		{give: "/a/:x/b/:y", want: "/a/{x}/b/{y}"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			if got := openAPIPath(tt.give); got != tt.want {
				t.Fatalf("openAPIPath(%q) = %q, want %q", tt.give, got, tt.want)
			}
		})
	}
}

// TestOpenAPIRoutes: every route of the app is documented, and every
// documented operation is a route. HEAD routes are Fiber's automatic
// companions of GET, and GetRoutes(true) leaves out middleware (Use).
func TestOpenAPIRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	f := newFixture(t)

	var routed []string
	for _, r := range f.app.GetRoutes(true) {
		if r.Method == fiber.MethodHead {
			continue
		}
		routed = append(routed, r.Method+" "+openAPIPath(r.Path))
	}
	var documented []string
	for path, item := range doc.Paths {
		for method := range item.operations() {
			documented = append(documented, method+" "+path)
		}
	}
	slices.Sort(routed)
	routed = slices.Compact(routed)
	slices.Sort(documented)
	if len(routed) == 0 || len(documented) == 0 {
		t.Fatalf("routes %q, documented %q: neither may be empty", routed, documented)
	}

	tests := []struct {
		name string
		give []string
		in   []string
	}{
		{name: "every route is documented", give: routed, in: documented},
		{name: "every documented operation is routed", give: documented, in: routed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, op := range tt.give {
				if !slices.Contains(tt.in, op) {
					t.Errorf("%s is missing; have %q", op, tt.in)
				}
			}
		})
	}
}

// viewStatuses are the status codes GET /realty/{ref} can answer, with
// where each comes from. Keep it in step with view, requireToken,
// statusOf and Fiber's serverErrorHandler.
var viewStatuses = map[string]string{
	"200": "the listing (view)",
	"304": "If-None-Match matched the ETag (view)",
	"400": "malformed ref (errBadPath), or a malformed If-Match or If-None-Match (conditions.precondition)",
	"401": "missing or invalid token (requireToken)",
	"404": "no such listing, or another firm's passive one (upstream.ErrNotFound)",
	"406": "Accept-Encoding refuses every coding (errNotAcceptable)",
	"412": "If-Match names no tag of the current version, or If-Unmodified-Since is past (readPrecondition)",
	"431": "request head over HeaderLimit (Fiber's serverErrorHandler)",
	"503": "store unavailable or deadline passed with nothing cached (upstream.ErrUnavailable)",
}

// TestOpenAPIViewStatuses: the document lists exactly the status codes
// GET /realty/{ref} can produce.
func TestOpenAPIViewStatuses(t *testing.T) {
	doc := loadOpenAPI(t)
	item, ok := doc.Paths["/realty/{ref}"]
	if !ok || item.Get == nil {
		t.Fatal("GET /realty/{ref} is not documented")
	}
	documented := slices.Sorted(maps.Keys(item.Get.Responses))
	produced := slices.Sorted(maps.Keys(viewStatuses))

	tests := []struct {
		name string
		give []string
		in   []string
	}{
		{name: "every documented status is one the code produces", give: documented, in: produced},
		{name: "every status the code produces is documented", give: produced, in: documented},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, code := range tt.give {
				if !slices.Contains(tt.in, code) {
					t.Errorf("%s is missing from %q (%s)", code, tt.in, viewStatuses[code])
				}
			}
		})
	}
}

// TestOpenAPIViewLive sends the requests behind the statuses of
// GET /realty/{ref} that the fixture can produce, and checks that each
// header of the answer is documented for its status.
func TestOpenAPIViewLive(t *testing.T) {
	doc := loadOpenAPI(t)
	f := newFixture(t)
	cdn := newFixtureWith(t, func(c *Config) { c.CDN.PublicActive = true }, NoPurge{})
	owner, other := bearer(t, 1, 1), bearer(t, 2, 3)
	// Headers every answer may carry whatever the document says.
	generic := []string{"Content-Length", "Content-Type", "Date"}
	for _, h := range doc.Components.Headers {
		if h.EveryResponse != "" {
			generic = append(generic, http.CanonicalHeaderKey(h.EveryResponse))
		}
	}

	tests := []struct {
		name        string
		path        string
		auth        string
		ifNoneMatch bool // with the listing's current ETag
		cdn         bool // in CDN mode
		want        int
	}{
		{name: "active listing by id", path: "/realty/1", auth: owner, want: http.StatusOK},
		{name: "active listing by number", path: "/realty/1-1", auth: other, want: http.StatusOK},
		{name: "passive listing of the own firm", path: "/realty/2", auth: owner, want: http.StatusOK},
		{name: "active listing in CDN mode", path: "/realty/1", auth: owner, cdn: true, want: http.StatusOK},
		{name: "passive listing in CDN mode", path: "/realty/2", auth: owner, cdn: true, want: http.StatusOK},
		{name: "matching If-None-Match in CDN mode", path: "/realty/1", auth: owner, ifNoneMatch: true, cdn: true, want: http.StatusNotModified},
		{name: "matching If-None-Match", path: "/realty/1", auth: owner, ifNoneMatch: true, want: http.StatusNotModified},
		{name: "leading zero", path: "/realty/01", auth: owner, want: http.StatusBadRequest},
		{name: "no token", path: "/realty/1", want: http.StatusUnauthorized},
		{name: "no such listing", path: "/realty/999", auth: owner, want: http.StatusNotFound},
		{name: "another firm's passive listing", path: "/realty/1-2", auth: other, want: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			app := f
			if tt.cdn {
				app = cdn
			}
			req := httptest.NewRequest(http.MethodGet, tt.path, nil)
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			if tt.ifNoneMatch {
				current, _ := app.get(t, tt.path, tt.auth)
				etag := current.Header.Get("ETag")
				if etag == "" {
					t.Fatal("no ETag on a listing")
				}
				req.Header.Set("If-None-Match", etag)
			}
			resp, body := app.do(t, req)
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
			documented, ok := doc.Paths["/realty/{ref}"].Get.Responses[strconv.Itoa(tt.want)]
			if !ok {
				t.Fatalf("status %d is not documented", tt.want)
			}
			headers := map[string]bool{}
			for name := range doc.response(t, documented).Headers {
				headers[http.CanonicalHeaderKey(name)] = true
			}
			for name := range resp.Header {
				if !headers[name] && !slices.Contains(generic, name) {
					t.Errorf("header %s of a %d is not documented", name, tt.want)
				}
			}
		})
	}
}

// jsonMembers returns the JSON member names of a struct type, by its json
// tags, without those tagged "-".
func jsonMembers(typ reflect.Type) []string {
	var names []string
	for i := range typ.NumField() {
		field := typ.Field(i)
		if !field.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(field.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = field.Name
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// TestOpenAPISchemas: the properties of each schema are the JSON members
// of the Go type it describes.
func TestOpenAPISchemas(t *testing.T) {
	doc := loadOpenAPI(t)
	// The write body also takes latitude, longitude and nearLocation at the
	// top level (DecodeListing moves them into location).
	topLevelCoordinates := []string{"latitude", "longitude", "nearLocation"}

	tests := []struct {
		schema string
		give   reflect.Type
		extra  []string
	}{
		{schema: "Listing", give: reflect.TypeFor[upstream.Listing]()},
		{schema: "Location", give: reflect.TypeFor[upstream.Location]()},
		{schema: "RealtyFile", give: reflect.TypeFor[upstream.RealtyFile]()},
		{schema: "Attributes", give: reflect.TypeFor[upstream.Attributes]()},
		{schema: "SelectedAttribute", give: reflect.TypeFor[upstream.SelectedAttribute]()},
		{schema: "ListingInput", give: reflect.TypeFor[upstream.Listing](), extra: topLevelCoordinates},
		{schema: "LocationInput", give: reflect.TypeFor[upstream.Location]()},
		{schema: "RealtyFileInput", give: reflect.TypeFor[upstream.RealtyFile]()},
		{schema: "AttributesInput", give: reflect.TypeFor[upstream.Attributes]()},
		{schema: "SelectedAttributeInput", give: reflect.TypeFor[upstream.SelectedAttribute]()},
		{schema: "Problem", give: reflect.TypeFor[problemBody]()},
		{schema: "FieldError", give: reflect.TypeFor[upstream.FieldError]()},
		{schema: "LoginRequest", give: reflect.TypeFor[loginRequest]()},
	}
	for _, tt := range tests {
		t.Run(tt.schema, func(t *testing.T) {
			s, ok := doc.Components.Schemas[tt.schema]
			if !ok {
				t.Fatalf("no schema %s", tt.schema)
			}
			var got []string
			for name := range s.Properties {
				got = append(got, name)
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(append(jsonMembers(tt.give), tt.extra...)))
			if !slices.Equal(got, want) {
				t.Fatalf("schema %s has properties\n%q\nwant the JSON members of %s\n%q", tt.schema, got, tt.give, want)
			}
		})
	}
}

// TestOpenAPIPortableYAML: no plain scalar is one that YAML 1.1 parsers
// (many OpenAPI tools) read as a boolean, such as the member name "no".
func TestOpenAPIPortableYAML(t *testing.T) {
	b, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		t.Fatal(err)
	}
	yaml11Booleans := []string{"y", "yes", "n", "no", "on", "off"}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.ScalarNode && n.Style == 0 && slices.Contains(yaml11Booleans, strings.ToLower(n.Value)) {
			t.Errorf("line %d: quote %q, YAML 1.1 reads it as a boolean", n.Line, n.Value)
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&root)
}

// TestOpenAPIRefPattern: the patterns of the ref parameter match every ref
// that parseRef takes, and refuse every one it refuses, except the one
// case the parameter's description names: a 19-digit number above the
// int64 maximum.
func TestOpenAPIRefPattern(t *testing.T) {
	param, ok := loadOpenAPI(t).Components.Parameters["Ref"]
	if !ok || len(param.Schema.OneOf) == 0 {
		t.Fatal("no parameter Ref with a oneOf schema")
	}
	var patterns []*regexp.Regexp
	for _, alt := range param.Schema.OneOf {
		re, err := regexp.Compile(alt.Pattern)
		if err != nil {
			t.Fatalf("pattern of %s: %v", alt.Title, err)
		}
		patterns = append(patterns, re)
	}
	matches := func(ref string) bool {
		return slices.ContainsFunc(patterns, func(re *regexp.Regexp) bool { return re.MatchString(ref) })
	}

	tests := []struct {
		name       string
		give       string
		wantSchema bool // a pattern matches
		wantCode   bool // parseRef takes it
	}{
		{name: "id", give: "1", wantSchema: true, wantCode: true},
		{name: "listing number", give: "12-345", wantSchema: true, wantCode: true},
		{name: "largest number of a create", give: "1-9007199254740991", wantSchema: true, wantCode: true},
		{name: "int64 maximum id", give: "9223372036854775807", wantSchema: true, wantCode: true},
		{name: "int64 maximum parts", give: "9223372036854775807-9223372036854775807", wantSchema: true, wantCode: true},
		{name: "19 digits above int64", give: "9223372036854775808", wantSchema: true},  // documented
		{name: "19 nines in a number", give: "1-9999999999999999999", wantSchema: true}, // documented
		{name: "20 digits", give: "10000000000000000000"},
		{name: "20-digit number", give: "1-10000000000000000000"},
		{name: "38-digit number", give: "1-" + strings.Repeat("1", 38)},
		{name: "zero", give: "0"},
		{name: "leading zero", give: "01"},
		{name: "zero number", give: "1-0"},
		{name: "sign", give: "+1"},
		{name: "negative", give: "-1"},
		{name: "empty number", give: "1-"},
		{name: "three parts", give: "1-2-3"},
		{name: "fullwidth digit", give: "\uff11"},
		{name: "trailing newline", give: "1\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := matches(tt.give); got != tt.wantSchema {
				t.Errorf("pattern matches %q: %v, want %v", tt.give, got, tt.wantSchema)
			}
			if _, got := ParseRef(tt.give); got != tt.wantCode {
				t.Errorf("ParseRef(%q) ok = %v, want %v", tt.give, got, tt.wantCode)
			}
		})
	}
}

// inputSchemas are the schemas of a listing body, each with the path
// DecodeListing gives its members.
var inputSchemas = []struct {
	schema string
	path   string
}{
	{schema: "ListingInput", path: ""},
	{schema: "LocationInput", path: "location."},
	{schema: "RealtyFileInput", path: "realtyFiles[0]."},
	{schema: "AttributesInput", path: "attributes."},
	{schema: "SelectedAttributeInput", path: "attributes.selectedAttributeList[0]."},
}

// isInteger reports whether a schema's type is integer, alone or with null.
func isInteger(schema map[string]any) bool {
	switch typ := schema["type"].(type) {
	case string:
		return typ == "integer"
	case []any:
		return slices.Contains(typ, any("integer"))
	}
	return false
}

// TestOpenAPIIntegerBounds: every integer member of a listing body, array
// items included, states the bounds DecodeListing enforces
// (upstream.IntRange), so that they cannot drift apart. Ids and numbers
// also take 0, which asks the server to assign one.
func TestOpenAPIIntegerBounds(t *testing.T) {
	doc := loadOpenAPI(t)
	checked := map[string]bool{}
	for _, in := range inputSchemas {
		s, ok := doc.Components.Schemas[in.schema]
		if !ok {
			t.Fatalf("no schema %s", in.schema)
		}
		for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
			prop, _ := s.Properties[name].(map[string]any)
			path := in.path + name
			if items, ok := prop["items"].(map[string]any); ok {
				prop, path = items, path+"[0]"
			}
			if !isInteger(prop) {
				continue
			}
			checked[path] = true
			t.Run(path, func(t *testing.T) {
				lo, hi := upstream.IntRange(path)
				if lo == 1 {
					lo = 0
				}
				for _, bound := range []struct {
					key  string
					want int64
				}{{"minimum", lo}, {"maximum", hi}} {
					got, ok := prop[bound.key].(int)
					if !ok || int64(got) != bound.want {
						t.Errorf("%s of %s = %v; want %d", bound.key, path, prop[bound.key], bound.want)
					}
				}
			})
		}
	}
	// The bounded members are among those checked.
	for _, path := range []string{"no", "realtyFiles[0].id"} {
		if !checked[path] {
			t.Errorf("%s is not an integer member of the input schemas", path)
		}
	}
	if lo, hi := upstream.IntRange("no"); lo != 1 || hi != upstream.MaxNumber || upstream.MaxNumber != 1<<53-1 {
		t.Errorf("IntRange(no) = [%d, %d], MaxNumber %d; want [1, 2^53-1]", lo, hi, upstream.MaxNumber)
	}
}

// TestDocsGiveTheOpenAPIDocumentsSize: the sizes docs/api.md gives for
// the served /openapi.yaml, whole and in each coding, are the document's.
func TestDocsGiveTheOpenAPIDocumentsSize(t *testing.T) {
	doc, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("the\\s+([0-9,]+)\\s+bytes\\s+of\\s+YAML\\s+are\\s+([0-9,]+)\\s+in\\s+`gzip`,\\s+([0-9,]+)\\s+in\\s+`br`\\s+and\\s+([0-9,]+)\\s+in\\s+`zstd`").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/api.md gives no size of /openapi.yaml (\"the N bytes of YAML are N in `gzip`, N in `br` and N in `zstd`\")")
	}
	z, err := coding.NewCompressor()
	if err != nil {
		t.Fatal(err)
	}
	v, err := newOpenAPIVariants(z)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []coding.Coding{coding.Identity, coding.Gzip, coding.Brotli, coding.Zstd} {
		if given, served := strings.ReplaceAll(string(m[i+1]), ",", ""), strconv.Itoa(len(v[c].body)); given != served {
			t.Errorf("docs/api.md gives /openapi.yaml %s bytes in %s; it is %s", m[i+1], c.Name(), served)
		}
	}
}
