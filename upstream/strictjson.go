package upstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"unicode/utf8"
)

// decoder fills a struct from JSON members by their json tags, strictly:
// it takes no unknown member and no value of the wrong type, and collects
// a FieldError for every member it cannot take, not just the first. Its
// input is a part of a document that json.Valid accepted.
type decoder struct {
	// noun names what is decoded, as in "is not a member of a listing".
	noun string
	// intRange bounds the integer member at a path, for the message of
	// an integer too large for an int64.
	intRange func(path string) (lo, hi int64)
	errs     []FieldError
	// path is the member being decoded, as "realtyFiles[2].id": built in
	// place as the decoder descends, and copied only into an error.
	path []byte
	// members holds the members of the objects being decoded, outer to
	// inner: an object's are appended as it is split and dropped when it
	// is done, so that one buffer serves a whole document.
	members []member
}

// fail records message for the member being decoded.
func (d *decoder) fail(message string) {
	d.errs = append(d.errs, FieldError{Field: string(d.path), Message: message})
}

// object decodes members, each named once (as splitObject returns them),
// into the struct v.
func (d *decoder) object(members []member, v reflect.Value) {
	fields := fieldsOf(v.Type())
	for _, m := range members {
		n := len(d.path)
		if n > 0 {
			d.path = append(d.path, '.')
		}
		d.path = append(d.path, m.name...)
		if f, ok := fields[m.name]; ok {
			d.value(m.value, v.Field(f.index))
		} else {
			d.fail("is not a member of " + d.noun)
		}
		d.path = d.path[:n]
	}
}

// field is a struct field by its json tag: the tag, kept once, and the
// field's index.
type field struct {
	name  string
	index int
}

// fieldIndexes holds each struct type's fields by json tag, as
// encoding/json caches its field lists: facts about types, each stored
// once and never changed, so any goroutine may read them.
var fieldIndexes sync.Map // reflect.Type → map[string]field

func fieldsOf(t reflect.Type) map[string]field {
	if f, ok := fieldIndexes.Load(t); ok {
		return f.(map[string]field)
	}
	fields := make(map[string]field, t.NumField())
	for i := range t.NumField() {
		if tag := t.Field(i).Tag.Get("json"); tag != "" && tag != "-" {
			fields[tag] = field{name: tag, index: i}
		}
	}
	f, _ := fieldIndexes.LoadOrStore(t, fields)
	return f.(map[string]field)
}

func (d *decoder) value(raw json.RawMessage, v reflect.Value) {
	isNull := string(raw) == "null"
	switch v.Kind() {
	case reflect.Pointer:
		if isNull {
			v.SetZero()
			return
		}
		p := reflect.New(v.Type().Elem())
		d.value(raw, p.Elem())
		v.Set(p)
	case reflect.Struct:
		start := len(d.members)
		members, ok := splitObject(raw, fieldsOf(v.Type()), d.members)
		if !ok {
			d.fail("must be an object")
			return
		}
		d.members = members
		d.object(members[start:], v)
		d.members = d.members[:start]
	case reflect.Slice:
		if isNull {
			v.SetZero()
			return
		}
		items, ok := splitArray(raw)
		if !ok {
			d.fail("must be an array")
			return
		}
		s := reflect.MakeSlice(v.Type(), len(items), len(items))
		n := len(d.path)
		for i, item := range items {
			d.path = append(strconv.AppendInt(append(d.path, '['), int64(i), 10), ']')
			d.value(item, s.Index(i))
			d.path = d.path[:n]
		}
		v.Set(s)
	default:
		if isNull {
			d.fail("must not be null")
			return
		}
		if fastScalar(raw, v) {
			return
		}
		err := json.Unmarshal(raw, v.Addr().Interface())
		switch {
		case err == nil:
		case v.Kind() == reflect.Int64 && isIntegerLiteral(raw):
			// An integer that does not fit an int64.
			d.fail(outOfRange(d.intRange(string(d.path))))
		default:
			d.fail("must be " + kindName(v.Kind()))
		}
	}
}

// fastScalar sets v from raw, and reports true, where raw is a plain
// literal of v's kind that json.Unmarshal would take as it is: a string
// without escapes or control characters in valid UTF-8, an integer that
// fits, a finite number, true or false. Anything else is left to
// json.Unmarshal and its errors. An import decodes tens of listings' worth
// of members a millisecond; one json.Unmarshal per member was most of it.
func fastScalar(raw []byte, v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String:
		if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
			return false
		}
		body := raw[1 : len(raw)-1]
		for _, c := range body {
			if c < 0x20 || c == '"' || c == '\\' {
				return false
			}
		}
		if !utf8.Valid(body) {
			return false
		}
		v.SetString(string(body))
		return true
	case reflect.Int64:
		if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) || !isIntegerLiteral(raw) {
			return false
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return false
		}
		v.SetInt(n)
		return true
	case reflect.Float64:
		if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
			return false
		}
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil {
			return false
		}
		v.SetFloat(f)
		return true
	case reflect.Bool:
		switch string(raw) {
		case "true":
			v.SetBool(true)
			return true
		case "false":
			v.SetBool(false)
			return true
		}
	}
	return false
}

func kindName(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int64:
		return "an integer"
	case reflect.Float64:
		return "a number"
	default:
		return "a " + k.String()
	}
}

func outOfRange(lo, hi int64) string {
	return fmt.Sprintf("is out of range: must be within [%d, %d]", lo, hi)
}

// isIntegerLiteral reports whether raw is a JSON number written as an
// integer, without fraction or exponent.
func isIntegerLiteral(raw []byte) bool {
	digits := bytes.TrimPrefix(bytes.TrimSpace(raw), []byte("-"))
	if len(digits) == 0 {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
