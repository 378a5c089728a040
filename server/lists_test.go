package server

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/wire"
)

// jsonList is a JSON array of n strings s, or with obj an object of n
// keys "0", "1", … each with value s.
func jsonList(n int, s string, obj bool) string {
	var b strings.Builder
	b.WriteByte("[{"[boolInt(obj)])
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		if obj {
			fmt.Fprintf(&b, `"%d":`, i)
		}
		b.WriteString(`"` + s + `"`)
	}
	b.WriteByte("]}"[boolInt(obj)])
	return b.String()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestBodyListsCapped: every list and map of a request body decodes at
// its cap, and one entry more is refused while decoding, as invalid input
// naming the field and its cap.
func TestBodyListsCapped(t *testing.T) {
	for _, c := range []struct {
		body  string // with %s for the list
		field string
		max   int
		obj   bool
		into  func() any
	}{
		{`{"argv":%s}`, "argv", wire.MaxArgv, false, func() any { return new(RunRequest) }},
		{`{"argv":["x"],"env":%s}`, "env", wire.MaxEnv, false, func() any { return new(RunRequest) }},
		{`{"argv":["x"],"artifact_types":%s}`, "artifact_types", wire.MaxMIMETypes, false, func() any { return new(RunRequest) }},
		{`{"argv":["x"],"allow_host":%s}`, "allow_host", wire.MaxAllowHosts, false, func() any { return new(RunRequest) }},
		{`{"argv":["x"],"credential":%s}`, "credential", wire.MaxCredentials, false, func() any { return new(RunRequest) }},
		{`{"labels":%s}`, "labels", wire.MaxLabels, true, func() any { return new(SandboxRequest) }},
		{`{"download_types":%s}`, "download_types", wire.MaxMIMETypes, false, func() any { return new(SandboxRequest) }},
		{`{"env":%s}`, "env", wire.MaxEnv, false, func() any { return new(SandboxRequest) }},
		{`{"argv":%s}`, "argv", wire.MaxArgv, false, func() any { return new(ExecRequest) }},
		{`{"argv":["x"],"env":%s}`, "env", wire.MaxEnv, false, func() any { return new(ExecRequest) }},
		{`{"paths":%s}`, "paths", runner.MaxDownloadFiles, false, func() any { return new(ReadFilesRequest) }},
		{`{"code":"","language":"python","files":%s}`, "files", wire.MaxCodeFiles, true, func() any { return new(FusionRequest) }},
		{`{"code":"","language":"python","fetch_files":%s}`, "fetch_files", maxFetchNames, false, func() any { return new(FusionRequest) }},
	} {
		at := fmt.Sprintf(c.body, jsonList(c.max, "a,]}\\\"", c.obj))
		if err := decodeJSON(strings.NewReader(at), c.into()); err != nil {
			t.Errorf("%T.%s at its cap %d: %v", c.into(), c.field, c.max, err)
		}
		over := fmt.Sprintf(c.body, jsonList(c.max+1, "", c.obj))
		err := decodeJSON(strings.NewReader(over), c.into())
		want := fmt.Sprintf("%s with %d entries: give at most %d", c.field, c.max+1, c.max)
		if fe, ok := errors.AsType[*wire.Error](err); !ok || fe.Field != c.field || kindOf(err) != KindInvalidInput || !strings.Contains(err.Error(), want) {
			t.Errorf("%T.%s past its cap: %v; want invalid input saying %q", c.into(), c.field, err, want)
		}
	}
	var q RunRequest
	if err := decodeJSON(strings.NewReader(`{"argv":["a","[\"b\",\"c\"]",""],"env":[],"artifact_types":null}`), &q); err != nil || len(q.Argv) != 3 || q.Env == nil || q.ArtifactTypes != nil {
		t.Errorf("argv %q, env %#v, artifact_types %#v, %v; want 3 arguments, an empty env and no artifact_types", q.Argv, q.Env, q.ArtifactTypes, err)
	}
	if err := decodeJSON(strings.NewReader(`{"argv":[1]}`), &q); err == nil || !strings.Contains(err.Error(), `field "argv"`) {
		t.Errorf("argv of a number: %v; want the field named", err)
	}
}

// TestOverCapBodyCostsLittle: a body of --max-body whose list passes its
// cap is refused having allocated, to decode it, a few times the body
// (the decoder's buffer, grown by doubling, is 4), not the 18 times its strings and maps would take decoded (300MiB for
// 16MiB); through the API, the answer names the field.
func TestOverCapBodyCostsLittle(t *testing.T) {
	s, _ := newTestServer(t, nil)
	fill := func(prefix, entry, last string) string {
		n := (DefaultMaxBody - len(prefix) - len(last) - 64) / len(entry)
		return prefix + strings.Repeat(entry, n) + last
	}
	keys := func() string {
		var b strings.Builder
		b.WriteString(`{"code":"","language":"python","files":{`)
		for i := 0; b.Len() < DefaultMaxBody-64; i++ {
			fmt.Fprintf(&b, `"%d":"",`, i)
		}
		b.WriteString(`"x":""}}`)
		return b.String()
	}
	for _, c := range []struct {
		path, body, field string
		into              func() any
	}{
		{"/v1/runs", fill(`{"argv":[`, `"",`, `""]}`), "argv", func() any { return new(RunRequest) }},
		{"/v1/sandboxes", fill(`{"labels":{`, `"a":"",`, `"b":""}}`), "labels", func() any { return new(SandboxRequest) }},
		{"/run_code", keys(), "files", func() any { return new(FusionRequest) }},
		{"/run_code", fill(`{"code":"","language":"python","fetch_files":[`, `"",`, `""]}`), "fetch_files", func() any { return new(FusionRequest) }},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		err := decodeJSON(strings.NewReader(c.body), c.into())
		runtime.ReadMemStats(&after)
		if got := after.TotalAlloc - before.TotalAlloc; err == nil || got > 5*uint64(len(c.body)) {
			t.Errorf("%s past its cap: %v, %d MiB allocated for a body of %d MiB; want it refused having allocated at most 5 times the body", c.field, err, got>>20, len(c.body)>>20)
		}
		rec := do(t, s.Handler(), false, "POST", c.path, c.body)
		if e := errorOf(t, rec); rec.Code != 400 || e.Kind != KindInvalidInput || !strings.HasPrefix(e.Message, c.field+" with ") {
			t.Errorf("%s with %s past its cap: %d %+v; want invalid_input naming %s", c.path, c.field, rec.Code, e, c.field)
		}
	}
}
