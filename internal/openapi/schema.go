// Package openapi builds the JSON Schemas of airlock's OpenAPI document
// from the Go types that are marshalled on the wire, with each type's and
// field's doc comment as its description. The schemas follow
// encoding/json: a field's name is its json tag's, a field marked
// omitempty or omitzero may be absent, and every other field is required.
// A type that writes its own JSON (a MarshalJSON method) has no schema
// unless one is given for it in Builder.Custom: asking for it is an error,
// so no schema silently disagrees with its type.
//
// A field's `openapi` tag refines it: "-" leaves it out (a field the
// server only decodes to refuse), "enum=a|b" lists its values.
package openapi

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Schema is one JSON Schema.
type Schema = map[string]any

// Builder turns Go types into schemas under components.schemas.
type Builder struct {
	// Docs are doc comments by "importpath.Type" and
	// "importpath.Type.Field" (see ParseDocs).
	Docs map[string]string
	// Custom are the schemas of types that write their own JSON, or whose
	// JSON the reflection cannot tell (enums of a string type).
	Custom map[reflect.Type]Schema
	// Schemas are the named schemas made so far.
	Schemas map[string]Schema

	names map[reflect.Type]string
	errs  []error
}

// NewBuilder returns an empty Builder.
func NewBuilder(docs map[string]string) *Builder {
	return &Builder{Docs: docs, Custom: map[reflect.Type]Schema{}, Schemas: map[string]Schema{}, names: map[reflect.Type]string{}}
}

// Name makes t the named schema name: a request body's when request is
// set, whose objects refuse fields they do not list, as the server's
// decoder does. It returns a reference to it.
func (b *Builder) Name(name string, t reflect.Type, request bool) Schema {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	b.names[t] = name
	b.Schemas[name] = b.object(t, request)
	return ref(name)
}

// Err is every type that had no schema.
func (b *Builder) Err() error {
	if len(b.errs) == 0 {
		return nil
	}
	return fmt.Errorf("openapi: %v", b.errs)
}

func ref(name string) Schema { return Schema{"$ref": "#/components/schemas/" + name} }

var (
	timeType      = reflect.TypeFor[time.Time]()
	rawType       = reflect.TypeFor[json.RawMessage]()
	marshalerType = reflect.TypeFor[json.Marshaler]()
	textType      = reflect.TypeFor[encoding.TextMarshaler]()
)

// of is t's schema, a reference when t is named.
func (b *Builder) of(t reflect.Type, request bool) Schema {
	if s, ok := b.Custom[t]; ok {
		return s
	}
	if t.Kind() == reflect.Pointer {
		return b.of(t.Elem(), request)
	}
	if name, ok := b.names[t]; ok {
		return ref(name)
	}
	switch {
	case t == timeType:
		return Schema{"type": "string", "format": "date-time"}
	case t == rawType:
		return Schema{"description": "any JSON value"}
	case t.Implements(marshalerType) || reflect.PointerTo(t).Implements(marshalerType) ||
		t.Implements(textType) || reflect.PointerTo(t).Implements(textType):
		b.errs = append(b.errs, fmt.Errorf("%s writes its own JSON: give Builder.Custom a schema for it", t))
		return Schema{}
	}
	switch t.Kind() {
	case reflect.String:
		return Schema{"type": "string"}
	case reflect.Bool:
		return Schema{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return Schema{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return Schema{"type": "number"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return Schema{"type": "string", "contentEncoding": "base64"}
		}
		return Schema{"type": "array", "items": b.of(t.Elem(), request)}
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			b.errs = append(b.errs, fmt.Errorf("%s: map keys must be strings", t))
		}
		return Schema{"type": "object", "additionalProperties": b.of(t.Elem(), request)}
	case reflect.Struct:
		return b.object(t, request)
	case reflect.Interface:
		return Schema{"description": "any JSON value"}
	}
	b.errs = append(b.errs, fmt.Errorf("%s: no schema for kind %s", t, t.Kind()))
	return Schema{}
}

// object is a struct's schema, embedded structs' fields inlined as
// encoding/json does.
func (b *Builder) object(t reflect.Type, request bool) Schema {
	props := Schema{}
	var required []string
	b.fields(t, request, props, &required)
	s := Schema{"type": "object", "properties": props}
	if d := b.Docs[t.PkgPath()+"."+t.Name()]; d != "" && t.Name() != "" {
		s["description"] = d
	}
	if len(required) > 0 {
		slices.Sort(required)
		s["required"] = required
	}
	if request {
		s["additionalProperties"] = false
	}
	return s
}

func (b *Builder) fields(t reflect.Type, request bool, props Schema, required *[]string) {
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) || f.Tag.Get("openapi") == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				b.fields(et, request, props, required)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		s := b.of(f.Type, request)
		if enum, ok := strings.CutPrefix(f.Tag.Get("openapi"), "enum="); ok {
			s = Schema{"type": "string", "enum": strings.Split(enum, "|")}
		}
		if f.Type.Kind() == reflect.Pointer && !optionalTag(opts) {
			// A nil pointer is written as null.
			s = Schema{"anyOf": []any{s, Schema{"type": "null"}}}
		}
		if d := b.Docs[t.PkgPath()+"."+t.Name()+"."+f.Name]; d != "" {
			if _, isRef := s["$ref"]; isRef {
				s = Schema{"allOf": []any{s}, "description": d}
			} else {
				s = clone(s)
				s["description"] = d
			}
		}
		props[name] = s
		if !optionalTag(opts) && !(request && f.Type.Kind() == reflect.Pointer) {
			*required = append(*required, name)
		}
	}
}

// optionalTag reports whether a json tag's options let the field be absent.
func optionalTag(opts string) bool {
	return strings.Contains(","+opts+",", ",omitempty,") || strings.Contains(","+opts+",", ",omitzero,")
}

func clone(s Schema) Schema {
	out := make(Schema, len(s)+1)
	for k, v := range s {
		out[k] = v
	}
	return out
}
