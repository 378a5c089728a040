package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/wire"
)

// apiDoc is docs/api.md cut at its headings: each section's field table
// (the first column's `name`, and the backticked words of the second)
// and its JSON blocks.
type apiSection struct {
	fields map[string][]string
	json   []string
}

var (
	tableRow = regexp.MustCompile("^\\| `([a-z_0-9A-Z]+)` \\| ([^|]*)\\|")
	quoted   = regexp.MustCompile("`([^`]+)`")
)

func readAPIDoc(t *testing.T) map[string]*apiSection {
	t.Helper()
	f, err := os.Open("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc := map[string]*apiSection{}
	cur := &apiSection{fields: map[string][]string{}}
	var block *strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case block != nil && line == "```":
			cur.json = append(cur.json, block.String())
			block = nil
		case block != nil:
			block.WriteString(line + "\n")
		case line == "```json":
			block = &strings.Builder{}
		case strings.HasPrefix(line, "#"):
			cur = &apiSection{fields: map[string][]string{}}
			doc[strings.TrimSpace(strings.TrimLeft(line, "#"))] = cur
		default:
			if m := tableRow.FindStringSubmatch(line); m != nil {
				var words []string
				for _, q := range quoted.FindAllStringSubmatch(m[2], -1) {
					words = append(words, q[1])
				}
				cur.fields[m[1]] = words
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return doc
}

func section(t *testing.T, doc map[string]*apiSection, heading string) *apiSection {
	t.Helper()
	s := doc[heading]
	if s == nil {
		t.Fatalf("docs/api.md has no section %q", heading)
	}
	return s
}

// jsonFields lists the JSON names of v's fields a client sends, those of
// embedded structs included, with their openapi enums; fields hidden
// from the document (openapi:"-") are left out.
func jsonFields(typ reflect.Type, out map[string][]string) {
	for f := range typ.Fields() {
		if f.Anonymous {
			jsonFields(f.Type, out)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" || f.Tag.Get("openapi") == "-" {
			continue
		}
		var enum []string
		if e, ok := strings.CutPrefix(f.Tag.Get("openapi"), "enum="); ok {
			enum = strings.Split(e, "|")
		}
		out[name] = enum
	}
}

// The API's field tables list exactly the fields the server reads, with
// the values it takes.
func TestAPIDocFields(t *testing.T) {
	doc := readAPIDoc(t)
	for _, c := range []struct {
		heading string
		typ     reflect.Type
	}{
		{"Policy fields", reflect.TypeFor[wire.Policy]()},
		{"`POST /v1/sandboxes`", reflect.TypeFor[SandboxRequest]()},
	} {
		want := map[string][]string{}
		jsonFields(c.typ, want)
		if c.typ == reflect.TypeFor[SandboxRequest]() {
			// Its table lists its own fields; the policy's have theirs.
			policy := map[string][]string{}
			jsonFields(reflect.TypeFor[PolicyRequest](), policy)
			for k := range policy {
				delete(want, k)
			}
		}
		got := section(t, doc, c.heading).fields
		for name, enum := range want {
			words, ok := got[name]
			switch {
			case !ok:
				t.Errorf("docs/api.md, %s: field %q is missing from the table", c.heading, name)
			case enum != nil && !slices.Equal(words[:min(len(words), len(enum))], enum):
				t.Errorf("docs/api.md, %s: field %q lists %q; the server takes %q", c.heading, name, words, enum)
			}
		}
		for name := range got {
			if _, ok := want[name]; !ok {
				t.Errorf("docs/api.md, %s: the table lists %q, which the server does not read", c.heading, name)
			}
		}
	}
}

// The API's JSON examples are what the server reads and writes: each
// decodes, strictly, into its wire type.
func TestAPIDocExamples(t *testing.T) {
	doc := readAPIDoc(t)
	for _, c := range []struct {
		heading string
		n       int // which JSON block of the section
		v       any
	}{
		{"Errors", 0, &ErrorBody{}},
		{"Errors", 1, &ErrorBody{}},
		{"Templates", 0, &ErrorBody{}},
		{"`POST /v1/runs`", 0, &RunRequest{}},
		{"`POST /v1/sandboxes/{id}/exec`", 0, &ExecRequest{}},
		{"`POST /v1/sandboxes/{id}/files/read`", 0, &ReadFilesRequest{}},
		{"SandboxFusion-compatible endpoint", 0, &FusionRequest{}},
		{"SandboxFusion-compatible endpoint", 2, &fusionAnswer{}},
	} {
		s := section(t, doc, c.heading)
		if c.n >= len(s.json) {
			t.Errorf("docs/api.md, %s: no JSON block %d", c.heading, c.n+1)
			continue
		}
		dec := json.NewDecoder(bytes.NewReader([]byte(s.json[c.n])))
		dec.DisallowUnknownFields()
		if err := dec.Decode(c.v); err != nil {
			t.Errorf("docs/api.md, %s, JSON block %d is not a %T: %v\n%s", c.heading, c.n+1, c.v, err, s.json[c.n])
		}
	}
}

// fusionAnswer is /run_code's whole answer: FusionResponse and the files
// writeFusion adds.
type fusionAnswer struct {
	FusionResponse
	Files map[string]string `json:"files"`
}
