package templates

import (
	"bytes"
	"encoding/json"
	"os"
	"path"
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

// FuzzTemplateFile puts the bytes in a store as template fz's file and
// reads it as every run on it does (Store.Get). A file that reads is a
// template whose limits are all set and within bounds, whose paths are
// clean, which writes back and reads again to the same version, and which
// narrows to itself and never widens.
func FuzzTemplateFile(f *testing.F) {
	root := f.TempDir()
	idx := images.OpenIndex(filepath.Join(root, "images"))
	if err := idx.SetDefault(images.Lock{Ref: "airlock/default@sha256:" + strings.Repeat("1", 64), BuiltAt: time.Now()}); err != nil {
		f.Fatal(err)
	}
	st := Open(root)
	// A profile copy in the store, which a file may name by its sha256.
	def, err := seccomp.Load("default")
	if err != nil {
		f.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(st.Dir(), "seccomp"), 0o700); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(profilePath(st.Dir(), def.SHA256()), def.Bytes(), 0o600); err != nil {
		f.Fatal(err)
	}
	for _, s := range []runner.Spec{
		{},
		{Env: []string{"A=1"}, Workdir: "/home/user", Policy: isolation.Policy{Isolation: isolation.Seccomp, Limits: isolation.Limits{Memory: 256 << 20, CPUs: 1500, Timeout: 90 * time.Second}}},
		{Output: runner.Output{Disabled: true}},
		{Output: runner.Output{Dir: "/results", Size: 2 << 20, Files: 3, MaxFileSize: 1 << 20, Types: []string{"text/plain"}}},
	} {
		tp, err := New("fz", s, "oci", idx)
		if err != nil {
			f.Fatal(err)
		}
		b, err := json.MarshalIndent(tp, "", "  ")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		// The same without its version, and then naming the stored profile.
		b = bytes.Replace(b, []byte(`"version": "`+tp.Version()+`",`), nil, 1)
		f.Add(b)
		f.Add(bytes.Replace(b, []byte(`"seccomp_profile_sha256": ""`), []byte(`"seccomp_profile_sha256": "`+def.SHA256()+`"`), 1))
	}
	for _, s := range []string{
		``, `{}`, `null`, `[]`, `{"name":"fz"}`,
		`{"name":"fz","image":"airlock/default@sha256:` + strings.Repeat("1", 64) + `","engine":"auto","isolation":"gvisor","timeout":"0s","memory":"0B","cpus":"1","pids":0,"output_limit":"1MiB","tmp_size":"1MiB","file_size":"1MiB","open_files":0,"env":[],"workdir":"","out_dir":"none","seccomp_profile_sha256":"","created_at":"2026-01-01T00:00:00Z"}`,
		`{"name":"fz","seccomp_profile_sha256":"../../../etc/passwd"}`,
	} {
		f.Add([]byte(s))
	}

	file := st.path("fz")
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
		tp, err := st.Get("fz")
		if err != nil {
			if !errdefs.IsDataLoss(err) || !strings.Contains(err.Error(), "airlock template rm fz") {
				t.Fatalf("a file that does not read is not data loss with its fix: %v", err)
			}
			return
		}
		if tp.Name != "fz" || tp.Validate() != nil {
			t.Fatalf("Get returned %+v (%v)", tp, tp.Validate())
		}
		checkTemplate(t, tp)

		// Written back, it reads again the same.
		out, err := json.Marshal(tp)
		if err != nil {
			t.Fatalf("encoding: %v", err)
		}
		back := &Template{dir: st.Dir()}
		if err := json.Unmarshal(out, back); err != nil {
			t.Fatalf("%s does not read back: %v", out, err)
		}
		if back.Version() != tp.Version() || !back.CreatedAt.Equal(tp.CreatedAt) || back.Validate() != nil {
			t.Fatalf("read back as %+v, from %+v", back, tp)
		}

		// It narrows to itself, takes lower limits, and refuses higher ones.
		s, err := tp.Narrow(runner.Spec{Argv: []string{"true"}})
		if err != nil {
			t.Fatalf("narrowing by nothing: %v", err)
		}
		if s.Policy.Limits != tp.Limits || s.Policy.Isolation != tp.Isolation || s.Image != tp.Image || !slices.Equal(s.Env, tp.Env) {
			t.Fatalf("narrowed by nothing to %+v", s)
		}
		lower := tp.Limits
		lower.Memory, lower.Pids = max(lower.Memory/2, 1), max(lower.Pids-1, 1)
		if s, err := tp.Narrow(runner.Spec{Policy: isolation.Policy{Limits: lower}}); err != nil || s.Policy.Limits != lower {
			t.Fatalf("narrowing to %+v: %+v, %v", lower, s.Policy.Limits, err)
		}
		higher := isolation.Limits{Timeout: tp.Limits.Timeout + 1}
		if _, err := tp.Narrow(runner.Spec{Policy: isolation.Policy{Limits: higher}}); !errdefs.IsInvalidArgument(err) {
			t.Fatalf("a longer timeout than the template's: %v", err)
		}
	})
}

// checkTemplate checks what Validate promises of a template that passed it.
func checkTemplate(t *testing.T, tp *Template) {
	t.Helper()
	l := tp.Limits
	if l.Timeout <= 0 || l.Memory <= 0 || l.CPUs <= 0 || l.Pids <= 0 || l.Output <= 0 || l.Tmp <= 0 || l.FileSize <= 0 || l.OpenFiles <= 0 {
		t.Fatalf("a limit is not positive: %+v", l)
	}
	if _, err := images.ParseRef(tp.Image); err != nil {
		t.Fatalf("image %q: %v", tp.Image, err)
	}
	if tp.Workdir != "" && (!path.IsAbs(tp.Workdir) || path.Clean(tp.Workdir) != tp.Workdir) {
		t.Fatalf("workdir %q", tp.Workdir)
	}
	if p := tp.ProfilePath(); p != "" && filepath.Dir(p) != filepath.Join(tp.dir, "seccomp") {
		t.Fatalf("the profile copy %q is outside the store's seccomp directory", p)
	}
	o := tp.Output
	if o.Disabled {
		if o.Dir != "" || o.Size != 0 || o.Files != 0 || o.Types != nil {
			t.Fatalf("a disabled output with settings: %+v", o)
		}
		return
	}
	if !path.IsAbs(o.Dir) || path.Clean(o.Dir) != o.Dir || o.Size <= 0 || o.Files <= 0 || o.MaxFileSize <= 0 || o.MaxFileSize > o.Size || len(o.Types) == 0 {
		t.Fatalf("output %+v", o)
	}
}
