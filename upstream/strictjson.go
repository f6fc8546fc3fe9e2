package upstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"unicode/utf8"
)

// decoder fills a struct from JSON members by their json tags, strictly:
// it takes no unknown member and no value of the wrong type, and collects
// a FieldError for every member it cannot take, not just the first.
type decoder struct {
	// noun names what is decoded, as in "is not a member of a listing".
	noun string
	// intRange bounds the integer member at a path, for the message of
	// an integer too large for an int64.
	intRange func(path string) (lo, hi int64)
	errs     []FieldError
}

func (d *decoder) fail(field, message string) {
	d.errs = append(d.errs, FieldError{Field: field, Message: message})
}

func (d *decoder) object(members map[string]json.RawMessage, v reflect.Value, path string) {
	fields := make(map[string]int, v.NumField())
	for i := range v.NumField() {
		if tag := v.Type().Field(i).Tag.Get("json"); tag != "" && tag != "-" {
			fields[tag] = i
		}
	}
	for _, name := range sortedKeys(members) {
		i, ok := fields[name]
		if !ok {
			d.fail(join(path, name), "is not a member of "+d.noun)
			continue
		}
		d.value(members[name], v.Field(i), join(path, name))
	}
}

func (d *decoder) value(raw json.RawMessage, v reflect.Value, path string) {
	isNull := bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
	switch v.Kind() {
	case reflect.Pointer:
		if isNull {
			v.SetZero()
			return
		}
		p := reflect.New(v.Type().Elem())
		d.value(raw, p.Elem(), path)
		v.Set(p)
	case reflect.Struct:
		var members map[string]json.RawMessage
		if err := json.Unmarshal(raw, &members); err != nil || members == nil {
			d.fail(path, "must be an object")
			return
		}
		d.object(members, v, path)
	case reflect.Slice:
		var items []json.RawMessage
		if isNull {
			v.SetZero()
			return
		}
		if err := json.Unmarshal(raw, &items); err != nil {
			d.fail(path, "must be an array")
			return
		}
		s := reflect.MakeSlice(v.Type(), len(items), len(items))
		for i, item := range items {
			d.value(item, s.Index(i), path+"["+strconv.Itoa(i)+"]")
		}
		v.Set(s)
	default:
		if isNull {
			d.fail(path, "must not be null")
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
			d.fail(path, outOfRange(d.intRange(path)))
		default:
			d.fail(path, "must be "+kindName(v.Kind()))
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

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func sortedKeys(m map[string]json.RawMessage) []string {
	return slices.Sorted(maps.Keys(m))
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
