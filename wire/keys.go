package wire

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"unicode"
)

// CheckKeys refuses the object keys of b, the JSON that encoding/json has
// decoded into v, that it takes silently: a key that names no field (an
// *UnknownKeyError; json.Decoder.DisallowUnknownFields does the same, but
// only on a second copy of the body), a field's name in another case
// ("MEMORY" for memory: json matches names without regard to case), and
// a key repeated in one object (the last one wins). The last two would
// let a client, a proxy or a log read one policy in the body where
// airlock runs another, and are an *Error naming the key. The keys of
// the structs and maps inside v are checked too.
//
// b must be valid JSON: call CheckKeys after the decoding succeeds.
func CheckKeys(b []byte, v any) error {
	s := keyScan{b: b}
	return s.value(reflect.TypeOf(v), "")
}

// CheckKeysFolded is CheckKeys for JSON that other tools read too (jq,
// Python), such as a signed receipt: v only guides the walk. A key that
// names no field is let through, and no two keys of any object (a map's,
// or one v does not describe, included) may be equal but for case. b must
// be valid JSON here too.
func CheckKeysFolded(b []byte, v any) error {
	s := keyScan{b: b, folded: true}
	return s.value(reflect.TypeOf(v), "")
}

// UnknownKeyError is a key that names no field of its object.
type UnknownKeyError struct {
	// Key is the key, after the keys of the objects it is in ("a.b").
	Key string
}

func (e *UnknownKeyError) Error() string { return fmt.Sprintf("unknown field %q", e.Key) }

// keyScan walks valid JSON beside the Go type it was decoded into.
type keyScan struct {
	b      []byte
	i      int
	folded bool // CheckKeysFolded
}

func (s *keyScan) peek() byte {
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return c
		}
	}
	return 0
}

// value reads one value; t is the Go type it decodes into, nil when
// unknown. A type with its own UnmarshalJSON is taken by its kind.
func (s *keyScan) value(t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch s.peek() {
	case '{':
		return s.object(t, path)
	case '[':
		s.i++
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		if s.peek() == ']' {
			s.i++
			return nil
		}
		for {
			if err := s.value(elem, path); err != nil {
				return err
			}
			c := s.peek()
			s.i++
			if c != ',' {
				return nil
			}
		}
	case '"':
		s.str(false)
	default: // a number, true, false or null
		for s.i < len(s.b) && !strings.ContainsRune(",]} \t\n\r", rune(s.b[s.i])) {
			s.i++
		}
	}
	return nil
}

// object reads an object: a struct's keys must be its fields' exact
// names, and no key of a struct or a map may repeat (folded: no key of
// any object may repeat but for case).
func (s *keyScan) object(t reflect.Type, path string) error {
	s.i++
	var kind reflect.Kind
	var fields map[string]reflect.Type
	var seen map[string]string // by fold(key) when folded
	if t != nil {
		kind = t.Kind()
	}
	if s.folded || kind == reflect.Struct || kind == reflect.Map {
		seen = map[string]string{}
	}
	if kind == reflect.Struct {
		fields = map[string]reflect.Type{}
		jsonFields(t, fields)
	}
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		s.peek()
		k := s.str(true)
		s.peek()
		s.i++ // ':'
		sk := k
		if s.folded {
			sk = fold(k)
		}
		prev, repeated := seen[sk]
		var vt reflect.Type
		switch {
		case s.folded && repeated:
			return fmt.Errorf("%skey %q repeats %q: give each key once", path, k, prev)
		case kind == reflect.Struct:
			var err error
			if vt, err = s.field(fields, k, path, repeated); err != nil {
				return err
			}
		case kind == reflect.Map:
			if repeated {
				return &Error{Field: strings.TrimSuffix(path, "."), Value: fmt.Sprintf("key %q given twice", k), Want: "give each key once"}
			}
			vt = t.Elem()
		}
		if seen != nil {
			seen[sk] = k
		}
		if err := s.value(vt, path+k+"."); err != nil {
			return err
		}
		c := s.peek()
		s.i++
		if c != ',' {
			return nil
		}
	}
}

// field is the type of the struct field that key k names, from fields by
// their JSON names.
func (s *keyScan) field(fields map[string]reflect.Type, k, path string, repeated bool) (reflect.Type, error) {
	if ft, ok := fields[k]; ok {
		if repeated {
			return nil, &Error{Field: path + k, Value: "given twice", Want: "give each field once"}
		}
		return ft, nil
	}
	for f := range fields {
		switch {
		case !strings.EqualFold(f, k):
		case s.folded:
			return nil, fmt.Errorf("%skey %q is not %q: keys are read as written", path, k, f)
		default:
			return nil, &Error{Field: path + k, Value: "is not a field", Want: fmt.Sprintf("field names are exact, case and all; give %q", path+f)}
		}
	}
	if s.folded {
		return nil, nil // the caller's to refuse, if it must
	}
	return nil, &UnknownKeyError{Key: path + k}
}

// fold is a key as encoding/json compares it with a field's name.
func fold(k string) string {
	return strings.Map(func(r rune) rune { return unicode.ToUpper(unicode.ToLower(r)) }, k)
}

// str reads a string and returns its value if want is set.
func (s *keyScan) str(want bool) string {
	start := s.i
	escaped := false
	for s.i++; s.i < len(s.b) && s.b[s.i] != '"'; s.i++ {
		if s.b[s.i] == '\\' {
			escaped = true
			s.i++
		}
	}
	s.i++
	if !want || s.i > len(s.b) { // past the end: not valid JSON
		return ""
	}
	raw := s.b[start:s.i]
	if !escaped {
		return string(raw[1 : len(raw)-1])
	}
	var v string
	json.Unmarshal(raw, &v)
	return v
}

// jsonFields adds t's fields by their JSON names, as encoding/json sees
// them: an embedded struct without a name of its own lends its fields,
// and t's own field wins over an embedded one's.
func jsonFields(t reflect.Type, into map[string]reflect.Type) {
	var embedded []reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				embedded = append(embedded, et)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, ok := into[name]; !ok {
			into[name] = f.Type
		}
	}
	for _, et := range embedded {
		jsonFields(et, into)
	}
}
