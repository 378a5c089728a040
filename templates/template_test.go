package templates

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/seccomp"
)

const (
	defID   = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	otherID = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

// testIndex is an image index whose default image is defID.
func testIndex(t *testing.T) *images.Index {
	t.Helper()
	idx := images.OpenIndex(filepath.Join(t.TempDir(), "images"))
	if err := idx.SetDefault(images.Lock{Ref: "airlock/default@" + defID, BuiltAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return idx
}

// profileFile writes a custom profile that narrows airlock's default (the
// default itself, re-indented) and returns its path.
func profileFile(t *testing.T) string {
	t.Helper()
	p, err := seccomp.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(p.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(v, "", " ")
	f := filepath.Join(t.TempDir(), "profile.json")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func mustNew(t *testing.T, name string, s runner.Spec) *Template {
	t.Helper()
	tp, err := New(name, s, "", testIndex(t))
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

func TestCheckName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"py", true}, {"numpy-1g", true}, {"a.b_c-d", true}, {"0", true}, {strings.Repeat("a", 63), true},
		{"", false}, {"Py", false}, {"-py", false}, {".py", false}, {"..", false}, {"a/b", false},
		{"a b", false}, {strings.Repeat("a", 64), false}, {"py\x00", false}, {"é", false},
	} {
		err := CheckName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("CheckName(%q) = %v, want ok %v", tc.name, err, tc.ok)
		}
		if err != nil && !errdefs.IsInvalidArgument(err) {
			t.Errorf("CheckName(%q): %v is not invalid argument", tc.name, err)
		}
	}
}

func TestNewPinsAndFillsDefaults(t *testing.T) {
	tp := mustNew(t, "py", runner.Spec{Policy: isolation.Policy{Limits: isolation.Limits{Memory: 256 << 20}}})
	if tp.Image != "airlock/default@"+defID {
		t.Errorf("image %q, want the default image pinned", tp.Image)
	}
	d := isolation.Default().Limits
	d.Memory = 256 << 20
	if tp.Limits != d {
		t.Errorf("limits %+v, want %+v", tp.Limits, d)
	}
	if tp.Engine != "auto" || tp.Isolation != isolation.GVisor {
		t.Errorf("engine %q isolation %q", tp.Engine, tp.Isolation)
	}
	if o := tp.Output; o.Dir != "/out" || o.Size != 64<<20 || o.Files != 1000 || o.MaxFileSize != 64<<20 || len(o.Types) == 0 {
		t.Errorf("output %+v: want the runner's defaults", o)
	}
}

func TestNewImage(t *testing.T) {
	idx := testIndex(t)
	if err := idx.Add(images.Record{Name: "team/tool", ID: otherID, Format: "oci", ImportedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		image, want string
		kind        func(error) bool
	}{
		{"", "airlock/default@" + defID, nil},
		{defID, "airlock/default@" + defID, nil},
		{otherID, "team/tool@" + otherID, nil},
		{"mine/tool@" + otherID, "mine/tool@" + otherID, nil},
		{"python:3.12", "", errdefs.IsInvalidArgument},
		{"python", "", errdefs.IsInvalidArgument},
		{"sha256:" + strings.Repeat("3", 64), "", errdefs.IsNotFound},
	} {
		tp, err := New("x", runner.Spec{Image: tc.image}, "", idx)
		switch {
		case tc.kind == nil && err != nil:
			t.Errorf("image %q: %v", tc.image, err)
		case tc.kind == nil && tp.Image != tc.want:
			t.Errorf("image %q pinned as %q, want %q", tc.image, tp.Image, tc.want)
		case tc.kind != nil && (err == nil || !tc.kind(err)):
			t.Errorf("image %q: got %v, want a classified refusal", tc.image, err)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	idx := testIndex(t)
	for _, tc := range []struct {
		what   string
		spec   runner.Spec
		engine string
		want   string
	}{
		{"name", runner.Spec{}, "", "template name"},
		{"engine", runner.Spec{}, "podman", "engine \"podman\""},
		{"isolation", runner.Spec{Policy: isolation.Policy{Isolation: "kvm"}}, "", "isolation \"kvm\""},
		{"memory", runner.Spec{Policy: isolation.Policy{Limits: isolation.Limits{Memory: 1 << 20}}}, "", "memory 1MiB is below"},
		{"pids", runner.Spec{Policy: isolation.Policy{Limits: isolation.Limits{Pids: 1 << 20}}}, "", "pids 1048576"},
		{"env", runner.Spec{Env: []string{"1X=2"}}, "", "env entry \"1X=2\""},
		{"workdir", runner.Spec{Workdir: "rel"}, "", "workdir \"rel\""},
		{"out_dir", runner.Spec{Output: runner.Output{Dir: "/etc/x"}}, "", "out_dir"},
		{"out_limit", runner.Spec{Output: runner.Output{Size: 1024}}, "", "out_limit of at least 1MiB"},
		{"types", runner.Spec{Output: runner.Output{Types: []string{"no/such"}}}, "", "unknown MIME type"},
		{"inputs", runner.Spec{Inputs: []runner.Input{{Host: "/x"}}}, "", "no command, inputs"},
		{"artifacts", runner.Spec{Output: runner.Output{Artifacts: "/tmp/a"}}, "", "artifact destination"},
	} {
		name := "ok"
		if tc.what == "name" {
			name = "Bad Name"
		}
		_, err := New(name, tc.spec, tc.engine, idx)
		if err == nil || !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an invalid-argument error containing %q", tc.what, err, tc.want)
		}
	}
	// A profile that allows what the default denies is refused.
	wide := filepath.Join(t.TempDir(), "wide.json")
	os.WriteFile(wide, []byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`), 0o644)
	if _, err := New("ok", runner.Spec{SeccompProfile: wide}, "", idx); err == nil || !errdefs.IsInvalidArgument(err) {
		t.Errorf("a widening profile: got %v, want invalid argument", err)
	}
	if _, err := New("ok", runner.Spec{SeccompProfile: "/no/such/profile.json"}, "", idx); !errdefs.IsNotFound(err) {
		t.Errorf("a missing profile: got %v, want not found", err)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	tp := mustNew(t, "py", runner.Spec{
		Env: []string{"A=1"}, Workdir: "/work",
		Policy: isolation.Policy{Isolation: isolation.Seccomp, Limits: isolation.Limits{Timeout: 1500 * time.Millisecond, CPUs: 500, Memory: 1536 << 20}},
		Output: runner.Output{Size: 3 << 20, Types: []string{"text/plain"}}, SeccompProfile: profileFile(t),
	})
	b, err := json.Marshal(tp)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"memory":"1536MiB"`, `"timeout":"1.5s"`, `"cpus":"0.5"`, `"out_limit":"3MiB"`, `"version":"` + tp.Version() + `"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON %s lacks %s", b, want)
		}
	}
	var back Template
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Version() != tp.Version() || back.Limits != tp.Limits || back.Output.Size != tp.Output.Size || !back.CreatedAt.Equal(tp.CreatedAt) {
		t.Errorf("round trip changed the template:\n%+v\n%+v", tp, back)
	}
	// An edited file no longer matches its version.
	edited := strings.Replace(string(b), `"1536MiB"`, `"2GiB"`, 1)
	if err := json.Unmarshal([]byte(edited), &back); err == nil || !strings.Contains(err.Error(), "version") {
		t.Errorf("edited template: got %v, want a version mismatch", err)
	}
	if err := json.Unmarshal([]byte(strings.Replace(string(b), `"pids"`, `"pidz"`, 1)), &back); err == nil {
		t.Error("an unknown field was accepted")
	}
	// No output directory round-trips as out_dir none.
	none := mustNew(t, "none", runner.Spec{Output: runner.Output{Disabled: true}})
	b, _ = json.Marshal(none)
	if err := json.Unmarshal(b, &back); err != nil || !back.Output.Disabled || !strings.Contains(string(b), `"out_dir":"none"`) {
		t.Errorf("out_dir none: %s → %+v, %v", b, back.Output, err)
	}
}

func TestVersion(t *testing.T) {
	base := mustNew(t, "py", runner.Spec{})
	v := base.Version()
	same := *base
	same.Name, same.CreatedAt = "other", time.Now().Add(time.Hour)
	if same.Version() != v {
		t.Error("the name or creation time changed the version")
	}
	for what, change := range map[string]func(*Template){
		"image":      func(t *Template) { t.Image = "x@" + otherID },
		"engine":     func(t *Template) { t.Engine = "oci" },
		"isolation":  func(t *Template) { t.Isolation = isolation.Seccomp },
		"memory":     func(t *Template) { t.Limits.Memory-- },
		"timeout":    func(t *Template) { t.Limits.Timeout++ },
		"cpus":       func(t *Template) { t.Limits.CPUs++ },
		"pids":       func(t *Template) { t.Limits.Pids++ },
		"output":     func(t *Template) { t.Limits.Output++ },
		"tmp":        func(t *Template) { t.Limits.Tmp++ },
		"file size":  func(t *Template) { t.Limits.FileSize++ },
		"nofile":     func(t *Template) { t.Limits.OpenFiles++ },
		"env":        func(t *Template) { t.Env = []string{"A=1"} },
		"workdir":    func(t *Template) { t.Workdir = "/w" },
		"out dir":    func(t *Template) { t.Output.Dir = "/o" },
		"out size":   func(t *Template) { t.Output.Size++ },
		"out files":  func(t *Template) { t.Output.Files++ },
		"max file":   func(t *Template) { t.Output.MaxFileSize-- },
		"types":      func(t *Template) { t.Output.Types = t.Output.Types[1:] },
		"no out":     func(t *Template) { t.Output = Output{Disabled: true} },
		"seccomp":    func(t *Template) { t.SeccompSHA256 = strings.Repeat("a", 64) },
		"allow host": func(tp *Template) { tp.Egress = testEgress(t, []string{"pypi.org"}, nil) },
		"credential": func(tp *Template) {
			tp.Egress = testEgress(t, nil, []string{"api.example.com=Authorization:KEY"})
		},
	} {
		c := *base
		c.Env, c.Output.Types = slices.Clone(base.Env), slices.Clone(base.Output.Types)
		change(&c)
		if c.Version() == v {
			t.Errorf("changing the %s left the version as it was", what)
		}
	}
}

func TestSpec(t *testing.T) {
	tp := mustNew(t, "py", runner.Spec{Env: []string{"A=1"}, Workdir: "/w", Policy: isolation.Policy{Limits: isolation.Limits{Pids: 64}}})
	s := tp.Spec()
	if s.Image != tp.Image || s.Policy.Limits != tp.Limits || s.Policy.Isolation != tp.Isolation || s.Workdir != "/w" ||
		!slices.Equal(s.Env, []string{"A=1"}) || s.Output.Dir != "/out" || s.SeccompProfile != "" {
		t.Errorf("Spec() = %+v", s)
	}
	s.Env[0] = "B=2"
	if tp.Env[0] != "A=1" {
		t.Error("Spec() shares the template's env")
	}
}

func TestErrorsAreClassified(t *testing.T) {
	_, err := New("x", runner.Spec{Image: "python:3"}, "", testIndex(t))
	if !errors.Is(err, images.ErrNotPinned) {
		t.Errorf("a tag: %v does not wrap images.ErrNotPinned", err)
	}
}
