package wire

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type keysInner struct {
	Name string `json:"name"`
}

type keysOuter struct {
	Policy
	Inner  keysInner            `json:"inner"`
	ByName map[string]keysInner `json:"by_name"`
	List   []keysInner          `json:"list"`
	Skip   string               `json:"-"`
	Raw    json.RawMessage      `json:"raw"`
}

// CheckKeys refuses what encoding/json takes silently: a field's name in
// another case, a repeated key, and (as DisallowUnknownFields would) a
// key that names no field; in nested structs and maps too.
func TestCheckKeys(t *testing.T) {
	for body, want := range map[string]string{
		`{"MEMORY":"1GiB"}`:                               `MEMORY is not a field: field names are exact, case and all; give "memory"`,
		`{"memory":"1GiB","memory":"2GiB"}`:               "memory given twice: give each field once",
		`{"inner":{"NAME":"a"}}`:                          `inner.NAME is not a field: field names are exact, case and all; give "inner.name"`,
		`{"list":[{"name":"a"},{"name":"a","name":"b"}]}`: "list.name given twice",
		`{"by_name":{"a":{},"a":{}}}`:                     `by_name key "a" given twice: give each key once`,
		`{"by_name":{"a":{"Name":"x"}}}`:                  `by_name.a.Name is not a field: field names are exact, case and all; give "by_name.a.name"`,
		`{"cpus":1,"cpus":"2"}`:                           "cpus given twice",
		`{"\u006demory":"1GiB","memory":"2GiB"}`:          "memory given twice",
		`{"ſkip":1}`:                                      `unknown field "ſkip"`,
	} {
		var v keysOuter
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		err := CheckKeys([]byte(body), &v)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v; want %q", body, err, want)
		}
	}
	var uk *UnknownKeyError
	if err := CheckKeys([]byte(`{"inner":{"nom":"a"}}`), new(keysOuter)); !errors.As(err, &uk) || uk.Key != "inner.nom" {
		t.Errorf("unknown nested key: %v", err)
	}
	// Exact keys pass, as do a key in two objects, keys inside strings and
	// a json.RawMessage's keys (its own to check).
	for _, body := range []string{
		`{}`,
		` { "memory" : "1GiB" , "inner" : { "name" : "a" } , "list" : [ { "name" : "a" } , { "name" : "b" } ] } `,
		`{"env":["A={\"memory\":1,\"memory\":2}"],"by_name":{"a":{"name":"x"},"b":{"name":"x"}}}`,
		`{"raw":{"x":1,"x":2},"memory":"1\"GiB\\"}`,
	} {
		if err := CheckKeys([]byte(body), new(keysOuter)); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}

// A cpus of the wrong type names cpus.
func TestNumberRefusalNamesCPUs(t *testing.T) {
	for body, value := range map[string]string{`{"cpus":true}`: "true", `{"cpus":[1]}`: "[…]", `{"cpus":{"n":1}}`: "{…}"} {
		var we *Error
		if err := json.Unmarshal([]byte(body), new(Policy)); !errors.As(err, &we) || we.Field != "cpus" || we.Value != value {
			t.Errorf("%s: %v; want a refusal of cpus %s", body, err, value)
		}
	}
}

// CheckKeysFolded, for JSON others read too, lets a key that names no
// field through and refuses keys equal but for case in any object.
func TestCheckKeysFoldedRefusesKeysEqualButForCase(t *testing.T) {
	for body, want := range map[string]string{
		`{"memory":"1GiB","MEMORY":"2GiB"}`: `key "MEMORY" repeats "memory": give each key once`,
		`{"by_name":{"a":{},"A":{}}}`:       `by_name.key "A" repeats "a"`,
		`{"raw":{"k":1,"K":2}}`:             `raw.key "K" repeats "k"`,
		`{"note":{"x":1,"x":2}}`:            `note.key "x" repeats "x"`,
		`{"inner":{"Name":"a"}}`:            `inner.key "Name" is not "name": keys are read as written`,
	} {
		if err := CheckKeysFolded([]byte(body), new(keysOuter)); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v; want %q", body, err, want)
		}
	}
	if err := CheckKeysFolded([]byte(`{"note":1,"inner":{"nom":"a"}}`), new(keysOuter)); err != nil {
		t.Errorf("keys that name no field: %v", err)
	}
}
