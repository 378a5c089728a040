package server

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"reflect"
	"regexp"
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/errkind"
	"github.com/airlock-sandbox/airlock/internal/openapi"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/lifecycle"
	"github.com/airlock-sandbox/airlock/receipt"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/wire"
)

var update = flag.Bool("update", false, "rewrite openapi.json from the wire types")

// openapiDocument builds the OpenAPI document: openapi.in.json's routes
// and prose, with every schema made from the Go type the server marshals
// or decodes.
func openapiDocument(t *testing.T) []byte {
	t.Helper()
	mod := "github.com/airlock-sandbox/airlock/"
	docs, err := openapi.ParseDocs(map[string]string{
		mod + "server": ".", mod + "runner": "../runner", mod + "isolation": "../isolation",
		mod + "artifacts": "../artifacts", mod + "receipt": "../receipt", mod + "wire": "../wire",
	})
	if err != nil {
		t.Fatal(err)
	}
	b := openapi.NewBuilder(docs)
	var kinds []string
	for _, r := range errkind.Table {
		kinds = append(kinds, string(r.Kind))
	}
	reasons := []string{}
	for _, r := range []runner.Reason{runner.ReasonExited, runner.ReasonTimeout, runner.ReasonOOM, runner.ReasonOutputLimit,
		runner.ReasonPidsLimit, runner.ReasonKilled, runner.ReasonDestroyed, runner.ReasonError} {
		reasons = append(reasons, string(r))
	}
	b.Custom[reflect.TypeFor[runner.Reason]()] = openapi.Schema{"type": "string", "enum": reasons}
	b.Custom[reflect.TypeFor[wire.Number]()] = openapi.Schema{"type": []string{"string", "number"}}
	b.Custom[reflect.TypeFor[lifecycle.State]()] = openapi.Schema{"type": "string", "description": "the sandbox's lifecycle state"}
	b.Custom[reflect.TypeFor[runner.Stream]()] = openapi.Schema{"$ref": "#/components/schemas/Stream"}
	b.Schemas["Stream"] = openapi.Schema{
		"type":        "object",
		"description": "one output stream: its first bytes as text when they are UTF-8, else as base64; when cut at the cap, its last bytes too",
		"required":    []string{"bytes", "sha256", "truncated"},
		"properties": openapi.Schema{
			"text":          openapi.Schema{"type": "string", "description": "the first bytes kept, when they are UTF-8"},
			"base64":        openapi.Schema{"type": "string", "contentEncoding": "base64", "description": "the first bytes kept, exactly, when they are not UTF-8"},
			"bytes":         openapi.Schema{"type": "integer", "description": "every byte the program wrote to the stream, kept or not"},
			"truncated":     openapi.Schema{"type": "boolean", "description": "the stream passed its cap"},
			"sha256":        openapi.Schema{"type": "string", "description": "hex sha256 of every byte written"},
			"tail":          openapi.Schema{"type": "string", "description": "when truncated: the last bytes, when they are UTF-8"},
			"tail_base64":   openapi.Schema{"type": "string", "contentEncoding": "base64", "description": "when truncated: the last bytes, exactly, when they are not UTF-8"},
			"omitted_bytes": openapi.Schema{"type": "integer", "description": "when truncated: the bytes between the head and the tail, dropped"},
		},
		"additionalProperties": false,
	}
	b.Custom[reflect.TypeFor[receipt.Signed]()] = openapi.Schema{"$ref": "#/components/schemas/SignedReceipt"}
	b.Name("Receipt", reflect.TypeFor[receipt.Receipt](), false)
	b.Schemas["SignedReceipt"] = openapi.Schema{
		"type":        "object",
		"description": "the signed evidence of a run or an exec; airlock receipt verify checks it",
		"required":    []string{"receipt", "key_id", "public_key", "signature"},
		"properties": openapi.Schema{
			"receipt":    openapi.Schema{"$ref": "#/components/schemas/Receipt"},
			"key_id":     openapi.Schema{"type": "string"},
			"public_key": openapi.Schema{"type": "string", "contentEncoding": "base64", "description": "the ed25519 key that signed"},
			"signature":  openapi.Schema{"type": "string", "contentEncoding": "base64", "description": "over the receipt's canonical JSON"},
		},
	}
	b.Name("Limits", reflect.TypeFor[isolation.LimitsRecord](), false)
	b.Name("Policy", reflect.TypeFor[isolation.Record](), false)
	b.Name("Usage", reflect.TypeFor[runner.Usage](), false)
	b.Name("EgressTotals", reflect.TypeFor[egress.Totals](), false)
	b.Name("Artifact", reflect.TypeFor[artifacts.Artifact](), false)
	b.Name("Rejection", reflect.TypeFor[artifacts.Rejection](), false)
	b.Name("ErrorDetail", reflect.TypeFor[ErrorDetail](), false)
	b.Schemas["ErrorDetail"]["properties"].(openapi.Schema)["kind"] = openapi.Schema{"type": "string", "enum": kinds, "description": "the error's kind: docs/api.md lists them"}
	b.Name("Error", reflect.TypeFor[ErrorBody](), false)
	b.Name("RunRequest", reflect.TypeFor[RunRequest](), true)
	b.Name("SandboxRequest", reflect.TypeFor[SandboxRequest](), true)
	b.Name("ExecRequest", reflect.TypeFor[ExecRequest](), true)
	b.Name("Result", reflect.TypeFor[runner.Result](), false)
	b.Schemas["Result"]["properties"].(openapi.Schema)["error_kind"] = openapi.Schema{"type": "string", "enum": kinds, "description": "the kind of Error, with reason error: docs/api.md lists the kinds"}
	b.Name("Sandbox", reflect.TypeFor[runner.SandboxInfo](), false)
	b.Name("Transfer", reflect.TypeFor[runner.Transfer](), false)
	b.Name("TreeSummary", reflect.TypeFor[runner.TreeSummary](), false)
	b.Name("TreeReport", reflect.TypeFor[runner.TreeReport](), false)
	b.Name("ReadFilesRequest", reflect.TypeFor[ReadFilesRequest](), true)
	b.Name("FusionRequest", reflect.TypeFor[FusionRequest](), true)
	b.Name("FusionResponse", reflect.TypeFor[FusionResponse](), false)
	// files is streamed after the rest (writeFusion), not marshalled.
	fr := b.Schemas["FusionResponse"]
	fr["properties"].(openapi.Schema)["files"] = openapi.Schema{"type": "object", "additionalProperties": openapi.Schema{"type": "string", "contentEncoding": "base64"},
		"description": "each fetched file's content, base64, by the name fetch_files gave"}
	fr["required"] = append(fr["required"].([]string), "files")
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}

	in, err := os.ReadFile("openapi.in.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(in, &doc); err != nil {
		t.Fatalf("openapi.in.json: %v", err)
	}
	doc["components"].(map[string]any)["schemas"] = b.Schemas
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// openapi.json is generated from the wire types: `go generate ./server`
// (this test with -update) rewrites it, and any drift fails.
func TestOpenAPIGenerated(t *testing.T) {
	want := openapiDocument(t)
	if *update {
		if err := os.WriteFile("openapi.json", want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(openapiDoc, want) && !*update {
		t.Fatal("openapi.json is not what the wire types make: run `go generate ./server` and commit the result")
	}
}

// Every reference resolves, every request body refuses fields it does
// not list, and no schema leaves its contents unsaid. (TestOpenAPI checks
// the routes.)
func TestOpenAPISchemasComplete(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openapiDoc, &doc); err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`"#/components/schemas/(\w+)"`).FindAllSubmatch(openapiDoc, -1) {
		if _, ok := doc.Components.Schemas[string(m[1])]; !ok {
			t.Errorf("reference to schema %s, which is not there", m[1])
		}
	}
	for _, name := range []string{"RunRequest", "SandboxRequest", "ExecRequest", "FusionRequest"} {
		if doc.Components.Schemas[name]["additionalProperties"] != false {
			t.Errorf("request body %s allows any property", name)
		}
	}
	// No schema is a bare object or array with nothing said of its
	// contents.
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["type"] == "object" && v["properties"] == nil && v["additionalProperties"] == nil {
				t.Errorf("%s: an object with no properties", path)
			}
			if v["type"] == "array" && v["items"] == nil {
				t.Errorf("%s: an array with no items", path)
			}
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				walk(path+"/"+k, v[k])
			}
		case []any:
			for _, e := range v {
				walk(path, e)
			}
		}
	}
	for name, sch := range doc.Components.Schemas {
		walk(name, sch)
	}
}
