package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/wire"
)

// A cpus of the wrong type is refused naming cpus, as every other field
// is: encoding/json names no field for an UnmarshalJSON's error.
func TestCPUsOfWrongTypeNamesTheField(t *testing.T) {
	for _, body := range []string{`{"argv":["true"],"cpus":true}`, `{"argv":["true"],"cpus":[1]}`, `{"argv":["true"],"cpus":{"n":1}}`} {
		var q RunRequest
		err := decodeJSON(strings.NewReader(body), &q)
		if we, ok := errors.AsType[*wire.Error](err); !ok || we.Field != "cpus" {
			t.Errorf("%s: %v; want a refusal naming cpus", body, err)
		}
	}
}

// Keys are the fields' exact names, each once: encoding/json would match
// "MEMORY" to memory and let a later key replace an earlier one, so a
// client, a proxy or a log could read another policy than the one that
// runs. Every body decodeJSON reads is held to it, maps' keys included.
func TestBodyKeysExactAndOnce(t *testing.T) {
	for _, c := range []struct {
		body string
		into any
		says string
	}{
		{`{"argv":["true"],"memory":"64MiB","MEMORY":"1GiB"}`, new(RunRequest), `MEMORY is not a field: field names are exact, case and all; give "memory"`},
		{`{"argv":["true"],"memory":"64MiB","memory":"1GiB"}`, new(RunRequest), "memory given twice: give each field once"},
		{`{"argv":["true"],"Memory":"1GiB"}`, new(RunRequest), `give "memory"`},
		{`{"argv":["true"],"Template":"py"}`, new(RunRequest), `give "template"`},
		{`{"argv":["true"],"\u0074emplate":"a","template":"b"}`, new(RunRequest), "template given twice"},
		{`{"labels":{"a":"1","a":"2"}}`, new(SandboxRequest), `labels key "a" given twice: give each key once`},
		{`{"argv":["ls"],"TIMEOUT":"1s"}`, new(ExecRequest), `give "timeout"`},
		{`{"paths":["a"],"paths":["b"]}`, new(ReadFilesRequest), "paths given twice"},
		{`{"code":"","language":"python","memory_limit_mb":64}`, new(FusionRequest), `give "memory_limit_MB"`},
		{`{"code":"","language":"python","files":{"a.py":"","a.py":"eA=="}}`, new(FusionRequest), `files key "a.py" given twice`},
		{`{"type":"reconnect","Exec_ID":"x"}`, new(wsMessage), `give "exec_id"`},
	} {
		err := decodeJSON(strings.NewReader(c.body), c.into)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v; want a refusal saying %q", c.body, err, c.says)
		}
	}
	// The exact names, once each, pass, as do keys repeated in two objects.
	for _, c := range []struct {
		body string
		into any
	}{
		{`{"argv":["true"],"memory":"64MiB","cpus":0.5,"allow_host":["pypi.org"],"stdin_b64":"eA=="}`, new(RunRequest)},
		{`{"labels":{"a":"1","b":"1"},"ttl":"1m"}`, new(SandboxRequest)},
		{`{"code":"","language":"python","memory_limit_MB":64,"files":{"a":"","b":""}}`, new(FusionRequest)},
	} {
		if err := decodeJSON(strings.NewReader(c.body), c.into); err != nil {
			t.Errorf("%s: %v", c.body, err)
		}
	}
}
