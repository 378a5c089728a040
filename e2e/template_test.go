//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/runner"
)

// TestTemplates makes a template and uses it from run, sandbox create and
// batch: its limits and env arrive, a narrowing flag narrows, a widening
// one is refused naming the field, and a removed template is not found.
func TestTemplates(t *testing.T) {
	c := airlock(nil, "template", "create", "tpl-py", "--engine", engineName, "--isolation", isolationName,
		"--memory", "256MiB", "--timeout", "20s", "--pids", "64", "--cpus", "0.5", "--output-limit", "64KiB",
		"--tmp-size", "16MiB", "--out-limit", "8MiB", "--env", "FROM_TEMPLATE=yes", "--json")
	if c.code != 0 {
		t.Fatalf("template create: exit %d: %s", c.code, c.stderr)
	}
	t.Cleanup(func() { airlock(nil, "template", "rm", "tpl-py") })
	var tpl struct {
		Image, Version string
	}
	if err := json.Unmarshal([]byte(c.stdout), &tpl); err != nil || tpl.Image != defaultRef || len(tpl.Version) != 64 {
		t.Fatalf("template create --json: %q (%v): want the default image %s pinned, and a version", c.stdout, err, defaultRef)
	}
	if c := airlock(nil, "template", "create", "tpl-py"); c.code != 64 || !strings.Contains(c.stderr, "--replace") {
		t.Errorf("creating tpl-py again: exit %d: %s", c.code, c.stderr)
	}
	if c := airlock(nil, "template", "ls"); c.code != 0 || !strings.Contains(c.stdout, "tpl-py") || !strings.Contains(c.stdout, "256MiB") {
		t.Errorf("template ls: exit %d: %s%s", c.code, c.stdout, c.stderr)
	}

	const probe = `import os, resource; print(os.environ.get("FROM_TEMPLATE"), os.environ.get("JOB"), resource.getrlimit(resource.RLIMIT_NOFILE)[0])`
	t.Run("run", func(t *testing.T) {
		res, c := runJSON(t, nil, "--template", "tpl-py", "--env", "JOB=1", "--", "python3", "-c", probe)
		if res.Reason != runner.ReasonExited || res.ExitCode != 0 {
			t.Fatalf("run: %+v\n%s", res, c.stderr)
		}
		l := res.Limits
		if l.MemoryBytes != 256<<20 || l.TimeoutMS != 20000 || l.Pids != 64 || l.MilliCPUs != 500 || l.OutputBytes != 64<<10 || l.TmpBytes != 16<<20 {
			t.Errorf("limits %+v, want the template's", l)
		}
		if res.Policy == nil || res.Policy.Output == nil || res.Policy.Output.SizeBytes != 8<<20 {
			t.Errorf("policy %+v, want the template's 8MiB output directory", res.Policy)
		}
		if got := strings.TrimSpace(string(res.Stdout.Head)); got != "yes 1 1024" {
			t.Errorf("stdout %q, want the template's env, the run's own and the default open files", got)
		}
	})
	t.Run("narrower", func(t *testing.T) {
		res, c := runJSON(t, nil, "--template", "tpl-py", "--memory", "128MiB", "--timeout", "5s", "--", "python3", "-c", "print(1)")
		if res.Reason != runner.ReasonExited || res.Limits.MemoryBytes != 128<<20 || res.Limits.TimeoutMS != 5000 || res.Limits.Pids != 64 {
			t.Errorf("narrowed run: %+v\n%s", res, c.stderr)
		}
	})
	t.Run("wider", func(t *testing.T) {
		for _, args := range [][]string{
			{"--memory", "1GiB"}, {"--pids", "65"}, {"--timeout", "1m"}, {"--out-limit", "64MiB"}, {"--image", busybox},
		} {
			res, c := runJSON(t, nil, append(append([]string{"--template", "tpl-py"}, args...), "--", "true")...)
			field := strings.TrimPrefix(strings.ReplaceAll(args[0], "-", "_"), "__")
			if c.code != 64 || res.ID != "" || !strings.Contains(c.stderr, field) || !strings.Contains(c.stderr, `template "tpl-py"`) {
				t.Errorf("%v: exit %d, %q: want 64 and a message naming %s", args, c.code, c.stderr, field)
			}
		}
	})
	t.Run("sandbox", func(t *testing.T) {
		si := sbCreate(t, "--template", "tpl-py", "--memory", "192MiB", "--ttl", "2m")
		defer airlock(nil, "sandbox", "rm", si.ID)
		if si.Limits.MemoryBytes != 192<<20 || si.Limits.Pids != 64 || si.Limits.MilliCPUs != 500 {
			t.Errorf("sandbox limits %+v, want the template's narrowed to 192MiB", si.Limits)
		}
		res, c := sbExec(t, si.ID, nil, "python3", "-c", probe)
		if res.Reason != runner.ReasonExited || !strings.HasPrefix(string(res.Stdout.Head), "yes ") {
			t.Errorf("exec in a templated sandbox: %+v\n%s", res, c.stderr)
		}
		if _, err := sbCreateJSON(nil, "--template", "tpl-py", "--cpus", "2"); err == nil || !strings.Contains(err.Error(), "exit 64") || !strings.Contains(err.Error(), "cpus 2") {
			t.Errorf("a wider sandbox: %v", err)
		}
	})
	t.Run("batch", func(t *testing.T) {
		dir := t.TempDir()
		jobs := strings.Join([]string{
			`{"id": "on-template", "template": "tpl-py", "argv": ["python3", "-c", "import os; print(os.environ['FROM_TEMPLATE'])"], "expected_stdout": "yes\n"}`,
			`{"id": "narrower", "template": "tpl-py", "argv": ["true"], "limits": {"memory": "64MiB"}}`,
			`{"id": "wider", "template": "tpl-py", "argv": ["true"], "limits": {"memory": "1GiB"}}`,
			`{"id": "unknown", "template": "no-such", "argv": ["true"]}`,
			`{"id": "plain", "argv": ["true"]}`,
		}, "\n") + "\n"
		in, out := filepath.Join(dir, "jobs.jsonl"), filepath.Join(dir, "results.jsonl")
		if err := os.WriteFile(in, []byte(jobs), 0o644); err != nil {
			t.Fatal(err)
		}
		if c := airlock(nil, "batch", in, "--out", out, "--engine", engineName, "--isolation", isolationName, "--parallel", "2"); c.code != 0 {
			t.Fatalf("batch: exit %d: %s", c.code, c.stderr)
		}
		rs := readResults(t, out)
		if r := rs["on-template"]; r.Reason != runner.ReasonExited || r.Pass == nil || !*r.Pass || r.Limits.MemoryBytes != 256<<20 || r.Limits.Pids != 64 {
			t.Errorf("on-template: %+v", r)
		}
		if r := rs["narrower"]; r.Reason != runner.ReasonExited || r.Limits.MemoryBytes != 64<<20 || r.Limits.Pids != 64 {
			t.Errorf("narrower: %+v", r)
		}
		if r := rs["wider"]; r.Reason != runner.ReasonError || r.ErrorKind != "invalid_input" || !strings.Contains(r.Error, "memory 1GiB") {
			t.Errorf("wider: %+v", r)
		}
		if r := rs["unknown"]; r.Reason != runner.ReasonError || !strings.Contains(r.Error, `no template "no-such"`) {
			t.Errorf("unknown: %+v", r)
		}
		if r := rs["plain"]; r.Reason != runner.ReasonExited || r.Limits.MemoryBytes != 512<<20 {
			t.Errorf("plain: %+v", r)
		}
		// --template makes it every job's.
		out2 := filepath.Join(dir, "results2.jsonl")
		if c := airlock(nil, "batch", in, "--out", out2, "--template", "tpl-py", "--engine", engineName, "--isolation", isolationName); c.code != 0 {
			t.Fatalf("batch --template: exit %d: %s", c.code, c.stderr)
		}
		if r := readResults(t, out2)["plain"]; r.Reason != runner.ReasonExited || r.Limits.MemoryBytes != 256<<20 {
			t.Errorf("plain under --template: %+v", r)
		}
	})
	t.Run("replaced", func(t *testing.T) {
		if c := airlock(nil, "template", "create", "tpl-py", "--replace", "--memory", "128MiB", "--engine", engineName, "--isolation", isolationName, "--json"); c.code != 0 || strings.Contains(c.stdout, tpl.Version) {
			t.Fatalf("template create --replace: exit %d, %s%s: want a new version", c.code, c.stdout, c.stderr)
		}
		if res, c := runJSON(t, nil, "--template", "tpl-py", "--", "true"); res.Limits.MemoryBytes != 128<<20 {
			t.Errorf("after replace: %+v\n%s", res.Limits, c.stderr)
		}
	})
	t.Run("removed", func(t *testing.T) {
		if c := airlock(nil, "template", "rm", "tpl-py"); c.code != 0 {
			t.Fatalf("template rm: exit %d: %s", c.code, c.stderr)
		}
		res, c := runJSON(t, nil, "--template", "tpl-py", "--", "true")
		if c.code != 66 || res.ErrorKind != "not_found" || !strings.Contains(c.stderr, "airlock template ls") {
			t.Errorf("run on a removed template: exit %d, %q", c.code, c.stderr)
		}
		if c := airlock(nil, "template", "rm", "tpl-py"); c.code != 66 {
			t.Errorf("removing it again: exit %d, want 66", c.code)
		}
	})
}

// TestTemplateImage pins a template to an imported image by its digest.
func TestTemplateImage(t *testing.T) {
	if c := airlock(nil, "template", "create", "tpl-bb", "--image", "airlock-e2e/busybox:latest"); c.code != 64 || !strings.Contains(c.stderr, "tag") {
		t.Errorf("a tag: exit %d: %s", c.code, c.stderr)
	}
	c := airlock(nil, "template", "create", "tpl-bb", "--image", busybox, "--isolation", isolationName, "--memory", "64MiB")
	if c.code != 0 {
		t.Fatalf("template create: exit %d: %s", c.code, c.stderr)
	}
	defer airlock(nil, "template", "rm", "tpl-bb")
	res, c := runJSON(t, nil, "--template", "tpl-bb", "--", "sh", "-c", "echo hi")
	if res.Reason != runner.ReasonExited || res.ImageRef != busybox || strings.TrimSpace(string(res.Stdout.Head)) != "hi" || res.Limits.MemoryBytes != 64<<20 {
		t.Errorf("run on tpl-bb: %+v\n%s", res, c.stderr)
	}
}

// TestTemplateSeccompProfile keeps a template's own copy of a custom
// profile: the host file may go, the run still uses the profile, and only
// that same profile may be named again.
func TestTemplateSeccompProfile(t *testing.T) {
	c := airlock(nil, "seccomp", "export", "default")
	if c.code != 0 {
		t.Fatalf("seccomp export: exit %d: %s", c.code, c.stderr)
	}
	// The default, re-indented: other bytes, so another profile, that
	// narrows the default.
	var v any
	if err := json.Unmarshal([]byte(c.stdout), &v); err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(v, "", "    ")
	dir := t.TempDir()
	prof, other := filepath.Join(dir, "profile.json"), filepath.Join(dir, "other.json")
	os.WriteFile(prof, b, 0o644)
	os.WriteFile(other, []byte(c.stdout), 0o644)

	if c := airlock(nil, "template", "create", "tpl-sc", "--isolation", isolationName, "--seccomp-profile", prof); c.code != 0 {
		t.Fatalf("template create: exit %d: %s", c.code, c.stderr)
	}
	defer airlock(nil, "template", "rm", "tpl-sc")
	plain, _ := runJSON(t, nil, "--", "true")
	with, _ := runJSON(t, nil, "--seccomp-profile", prof, "--", "true")
	if err := os.Remove(prof); err != nil {
		t.Fatal(err)
	}
	res, c := runJSON(t, nil, "--template", "tpl-sc", "--", "sh", "-c", "echo ok")
	if res.Reason != runner.ReasonExited || string(res.Stdout.Head) != "ok\n" {
		t.Fatalf("run on tpl-sc after its host profile went: %+v\n%s", res, c.stderr)
	}
	// Under gVisor the applied profile is derived from the given one, so
	// only seccomp isolation shows the bytes' own hash.
	if res.Seccomp == "" || res.Seccomp != with.Seccomp || isolationName == "seccomp" && res.Seccomp == plain.Seccomp {
		t.Errorf("seccomp sha256 %s: want the custom profile's %s (the default's is %s)", res.Seccomp, with.Seccomp, plain.Seccomp)
	}
	if _, c := runJSON(t, nil, "--template", "tpl-sc", "--seccomp-profile", other, "--", "true"); c.code != 64 || !strings.Contains(c.stderr, "seccomp profile") {
		t.Errorf("another profile on tpl-sc: exit %d: %s", c.code, c.stderr)
	}
}
