package receipt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"unicode"
)

// exactKeys refuses JSON that encoding/json would read otherwise than a
// reader that takes keys as written (jq, Python): two keys of one object
// that are the same but for case (the decoder keeps the last), and a key
// that names a field of t in another case. Either would let a receipt or
// a Result show one value to other tools and another to the verifier.
// t guides the walk; where it names no struct, keys are only checked
// against each other.
func exactKeys(b []byte, t reflect.Type) error {
	if err := keysAsWritten(b, t); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// keysAsWritten is exactKeys for JSON that is no receipt, such as a
// results line: its error does not wrap ErrInvalid.
func keysAsWritten(b []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return walkKeys(dec, t, "")
}

func walkKeys(dec *json.Decoder, t reflect.Type, at string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]string{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			k := kt.(string)
			f := fold(k)
			if prev, ok := seen[f]; ok {
				return fmt.Errorf("%skey %q repeats %q: give each key once", at, k, prev)
			}
			seen[f] = k
			var sub reflect.Type
			if t != nil {
				switch t.Kind() {
				case reflect.Struct:
					if name, ft, ok := jsonField(t, f); ok {
						if name != k {
							return fmt.Errorf("%skey %q is not %q: keys are read as written", at, k, name)
						}
						sub = ft
					}
				case reflect.Map:
					sub = t.Elem()
				}
			}
			if err := walkKeys(dec, sub, at+k+"."); err != nil {
				return err
			}
		}
		_, err := dec.Token()
		return err
	case json.Delim('['):
		var sub reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			sub = t.Elem()
		}
		for dec.More() {
			if err := walkKeys(dec, sub, at); err != nil {
				return err
			}
		}
		_, err := dec.Token()
		return err
	}
	return nil
}

// fold is a key as encoding/json compares it with a field's name.
func fold(k string) string {
	return strings.Map(func(r rune) rune { return unicode.ToUpper(unicode.ToLower(r)) }, k)
}

// jsonField finds the field of struct t whose JSON name folds to f,
// embedded structs' fields included, and returns its name and type.
func jsonField(t reflect.Type, f string) (string, reflect.Type, bool) {
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if sf.Anonymous && name == "" {
			et := sf.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				if n, ft, ok := jsonField(et, f); ok {
					return n, ft, true
				}
			}
			continue
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		if fold(name) == f {
			return name, sf.Type, true
		}
	}
	return "", nil, false
}
