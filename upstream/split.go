package upstream

import (
	"bytes"
	"encoding/json"
	"slices"
	"unicode/utf8"
)

// The splitters cut a JSON object or array into its members as
// json.Unmarshal into a map[string]json.RawMessage or a
// []json.RawMessage does, without decoding the values: DecodeListing
// checks the whole document once with json.Valid, and each level of the
// strict decoder then splits only its own part. Given anything but a part
// of a valid document they never panic, and what they return is
// undefined.

// member is one member of a JSON object.
type member struct {
	name  string
	value json.RawMessage
}

// splitObject appends raw's members to buf, in their order, names
// unescaped, and returns the extended buf; a name given twice keeps its
// last value, in its last place. A name that known holds is shared with
// it, not allocated. It reports false when raw is not an object (null
// included), and then returns nil.
func splitObject(raw []byte, known map[string]field, buf []member) ([]member, bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, false
	}
	members := buf
	if i = skipSpace(raw, i+1); at(raw, i) == '}' {
		return members, true
	}
	for {
		if at(raw, i) != '"' {
			return nil, false
		}
		end := stringEnd(raw, i)
		if end-i < 2 || raw[end-1] != '"' {
			return nil, false
		}
		name := memberName(raw[i:end], known)
		if i = skipSpace(raw, end); at(raw, i) != ':' {
			return nil, false
		}
		if i = skipSpace(raw, i+1); i >= len(raw) {
			return nil, false
		}
		end = valueEnd(raw, i)
		members = append(members, member{name: name, value: raw[i:end:end]})
		i = skipSpace(raw, end)
		if at(raw, i) == '}' {
			break
		}
		if at(raw, i) != ',' {
			return nil, false
		}
		i = skipSpace(raw, i+1)
	}
	added := members[len(buf):]
	unique := added[:0]
	for k, m := range added {
		if !slices.ContainsFunc(added[k+1:], func(later member) bool { return later.name == m.name }) {
			unique = append(unique, m) // else a later value of the name replaces it
		}
	}
	return members[:len(buf)+len(unique)], true
}

// splitArray returns raw's items. It reports false when raw is not an
// array (null included), and then returns nil.
func splitArray(raw []byte) ([]json.RawMessage, bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return nil, false
	}
	items := []json.RawMessage{}
	if i = skipSpace(raw, i+1); at(raw, i) == ']' {
		return items, true
	}
	for {
		if i >= len(raw) {
			return nil, false
		}
		end := valueEnd(raw, i)
		items = append(items, raw[i:end:end])
		i = skipSpace(raw, end)
		if at(raw, i) == ']' {
			return items, true
		}
		if at(raw, i) != ',' {
			return nil, false
		}
		i = skipSpace(raw, i+1)
	}
}

// at returns raw[i], or 0 past its end.
func at(raw []byte, i int) byte {
	if i < len(raw) {
		return raw[i]
	}
	return 0
}

// memberName unquotes a member's name: as it is where it has no escape
// and is valid UTF-8, else as json.Unmarshal decodes it.
func memberName(quoted []byte, known map[string]field) string {
	name := quoted[1 : len(quoted)-1]
	if f, ok := known[string(name)]; ok {
		return f.name // a name without escapes, and valid UTF-8
	}
	if bytes.IndexByte(name, '\\') < 0 && utf8.Valid(name) {
		return string(name)
	}
	var s string
	_ = json.Unmarshal(quoted, &s) // a valid document's string
	return s
}

func skipSpace(raw []byte, i int) int {
	for i < len(raw) {
		switch raw[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// stringEnd returns the index just past the string that starts at i.
func stringEnd(raw []byte, i int) int {
	for i++; i < len(raw); i++ {
		switch raw[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(raw)
}

// valueEnd returns the index just past the value that starts at i.
func valueEnd(raw []byte, i int) int {
	switch raw[i] {
	case '"':
		return stringEnd(raw, i)
	case '{', '[':
		depth := 0
		for i < len(raw) {
			switch raw[i] {
			case '"':
				i = stringEnd(raw, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(raw)
	default: // a number, true, false or null
		for i < len(raw) {
			switch raw[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}
