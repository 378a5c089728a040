package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// DecodeList decodes a list at its cap, and refuses one past it naming
// the field, its length and the cap, having decoded none of it.
func TestDecodeList(t *testing.T) {
	var l []string
	if err := DecodeList([]byte(`["a","b"]`), &l, "env", 2, "NAME=VALUE entries"); err != nil || len(l) != 2 {
		t.Fatalf("at the cap: %q, %v", l, err)
	}
	l = nil
	err := DecodeList([]byte(`["a","b","c"]`), &l, "env", 2, "NAME=VALUE entries")
	if fe, ok := errors.AsType[*Error](err); !ok || fe.Field != "env" || err.Error() != "env with 3 entries: give at most 2 NAME=VALUE entries" || l != nil {
		t.Fatalf("past the cap: %q, %v", l, err)
	}
	var m map[string]string
	if err := DecodeList([]byte(`{"a":"1","a":"2","b":"3"}`), &m, "labels", 2, "labels"); err == nil || !strings.Contains(err.Error(), "labels with 3 entries") {
		t.Fatalf("a map past the cap (a repeated key counts): %v, %v", m, err)
	}
}

// A policy's lists decode as []string would (null nil, [] empty), and
// each refuses past its cap while decoding, naming itself.
func TestPolicyListsCapped(t *testing.T) {
	var p Policy
	if err := json.Unmarshal([]byte(`{"env":null,"allow_host":[],"artifact_types":["text/plain"]}`), &p); err != nil || p.Env != nil || p.AllowHost == nil || len(p.ArtifactTypes) != 1 {
		t.Fatalf("%+v, %v", p, err)
	}
	for field, max := range map[string]int{"env": MaxEnv, "artifact_types": MaxMIMETypes, "allow_host": MaxAllowHosts, "credential": MaxCredentials} {
		list := func(n int) []byte {
			return []byte(`{"` + field + `":[` + strings.Repeat(`"x",`, n-1) + `"x"]}`)
		}
		if err := json.Unmarshal(list(max), new(Policy)); err != nil {
			t.Errorf("%s at its cap: %v", field, err)
		}
		err := json.Unmarshal(list(max+1), new(Policy))
		if fe, ok := errors.AsType[*Error](err); !ok || fe.Field != field || !strings.Contains(err.Error(), fmt.Sprintf("give at most %d", max)) {
			t.Errorf("%s past its cap: %v", field, err)
		}
	}
}

// entries counts an array's or an object's entries at its own level,
// whatever its strings and nested values hold.
func TestEntries(t *testing.T) {
	for in, want := range map[string]int{
		`null`: 0, `"a,b"`: 0, `7`: 0, `[]`: 0, `{}`: 0, ` [ ] `: 0,
		`[""]`: 1, `[1]`: 1, `[null]`: 1, `[[]]`: 1, `[{}]`: 1,
		`["a","b"]`: 2, `[ "a" , "b" ]`: 2, `["a,b","c]","d\"e,"]`: 3,
		`[[1,2,3],{"a":1,"b":[4,5]},"x"]`: 3, `["\\",","]`: 2,
		`{"a":"","b":""}`: 2, `{"a,":"}","b":{"c":1,"d":2}}`: 2,
	} {
		if got := entries([]byte(in)); got != want {
			t.Errorf("entries(%s) = %d, want %d", in, got, want)
		}
	}
}

// Values counts every value inside arrays and objects, at any depth, at
// least once, and never what strings hold.
func TestValues(t *testing.T) {
	for in, want := range map[string]int{
		`null`: 0, `"a,[b{"`: 0, `[]`: 1, `[1]`: 1, `[1,2]`: 2,
		`{"a":[1,2,3],"b":{"c":"x,y"}}`: 6, `["\\",",","\"[{,"]`: 3,
	} {
		if got := Values([]byte(in)); got != want {
			t.Errorf("Values(%s) = %d, want %d", in, got, want)
		}
	}
}
