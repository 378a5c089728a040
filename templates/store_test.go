package templates

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
)

func TestStoreRoundTrip(t *testing.T) {
	root := t.TempDir()
	st := Open(root)
	if list, err := st.List(); err != nil || len(list) != 0 {
		t.Fatalf("an empty store lists %v, %v", list, err)
	}
	tp := mustNew(t, "py", runner.Spec{Env: []string{"A=1"}, Policy: isolation.Policy{Limits: isolation.Limits{Memory: 256 << 20}}})
	if err := st.Put(tp); err != nil {
		t.Fatal(err)
	}
	got, err := st.Get("py")
	if err != nil {
		t.Fatal(err)
	}
	if got.Version() != tp.Version() || got.Limits.Memory != 256<<20 || got.Env[0] != "A=1" {
		t.Errorf("Get = %+v, want %+v", got, tp)
	}
	for path, want := range map[string]os.FileMode{filepath.Join(root, "templates"): 0o700 | os.ModeDir, filepath.Join(root, "templates", "py.json"): 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", path, fi.Mode(), err, want)
		}
	}

	// A second Put of the name is refused; Replace replaces.
	tp2 := mustNew(t, "py", runner.Spec{Policy: isolation.Policy{Limits: isolation.Limits{Memory: 128 << 20}}})
	if err := st.Put(tp2); !errdefs.IsAlreadyExists(err) || !strings.Contains(err.Error(), "--replace") {
		t.Errorf("Put over an existing template: %v", err)
	}
	if got, _ := st.Get("py"); got.Limits.Memory != 256<<20 {
		t.Error("a refused Put changed the template")
	}
	if err := st.Replace(tp2); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.Get("py"); got.Version() != tp2.Version() {
		t.Error("Replace did not replace")
	}

	other := mustNew(t, "a-other", runner.Spec{})
	if err := st.Put(other); err != nil {
		t.Fatal(err)
	}
	list, err := st.List()
	if err != nil || len(list) != 2 || list[0].Name != "a-other" || list[1].Name != "py" {
		t.Errorf("List = %v, %v", list, err)
	}

	if err := st.Remove("py"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get("py"); !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "airlock template ls") {
		t.Errorf("Get after Remove: %v", err)
	}
	if err := st.Remove("py"); !errdefs.IsNotFound(err) {
		t.Errorf("Remove of a missing template: %v", err)
	}
	if _, err := st.Get("../etc/passwd"); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Get of a path: %v", err)
	}
}

func TestStoreCorrupt(t *testing.T) {
	root := t.TempDir()
	st := Open(root)
	if err := st.Put(mustNew(t, "good", runner.Spec{})); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(mustNew(t, "bad", runner.Spec{})); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(root, "templates", "bad.json")
	for what, content := range map[string]string{
		"not JSON":     "{",
		"wrong name":   strings.Replace(readFile(t, filepath.Join(root, "templates", "good.json")), `"good"`, `"bad2"`, 1),
		"edited limit": strings.Replace(strings.Replace(readFile(t, filepath.Join(root, "templates", "good.json")), `"good"`, `"bad"`, 1), `"512MiB"`, `"4GiB"`, 1),
		// Without a version to give it away, so that the hash's own check
		// is what refuses it.
		"profile path": regexp.MustCompile(`"version": "[0-9a-f]+",`).ReplaceAllString(strings.Replace(strings.Replace(readFile(t, filepath.Join(root, "templates", "good.json")),
			`"good"`, `"bad"`, 1), `"seccomp_profile_sha256": ""`, `"seccomp_profile_sha256": "../../../etc/passwd"`, 1), ""),
		"zero limit": `{"name":"bad","image":"sha256:` + strings.Repeat("1", 64) + `","engine":"auto","isolation":"gvisor","timeout":"1s","memory":"0B","cpus":"1","pids":8,"output_limit":"1MiB","tmp_size":"1MiB","file_size":"1MiB","open_files":64,"env":[],"workdir":"","out_dir":"none","seccomp_profile_sha256":"","created_at":"2026-01-01T00:00:00Z"}`,
	} {
		if err := os.WriteFile(bad, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := st.Get("bad")
		if what == "profile path" && (err == nil || !strings.Contains(err.Error(), "not 64 lower-case hex digits")) {
			t.Errorf("a profile hash that is a path: %v", err)
		}
		if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "airlock template rm bad") {
			t.Errorf("%s: Get = %v, want an error naming %s and the fix", what, err, bad)
		}
		list, err := st.List()
		if len(list) != 1 || list[0].Name != "good" || err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%s: List = %v, %v: want the good one and an error naming the bad one", what, list, err)
		}
	}
	// A corrupt template can be removed, which is the fix.
	if err := st.Remove("bad"); err != nil {
		t.Fatal(err)
	}
	if list, err := st.List(); err != nil || len(list) != 1 {
		t.Errorf("after removing the corrupt one: %v, %v", list, err)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestStoreSeccompCopy(t *testing.T) {
	root := t.TempDir()
	st := Open(root)
	prof := profileFile(t)
	tp := mustNew(t, "custom", runner.Spec{SeccompProfile: prof})
	if err := st.Put(tp); err != nil {
		t.Fatal(err)
	}
	// The host file may go: the template has its own copy.
	if err := os.Remove(prof); err != nil {
		t.Fatal(err)
	}
	got, err := st.Get("custom")
	if err != nil {
		t.Fatal(err)
	}
	cp := got.Spec().SeccompProfile
	if cp != filepath.Join(root, "templates", "seccomp", tp.SeccompSHA256+".json") {
		t.Fatalf("Spec's profile %q is not the store's copy", cp)
	}
	if fi, err := os.Stat(cp); err != nil || fi.Mode() != 0o600 {
		t.Errorf("profile copy: %v, %v", fi, err)
	}
	// A second template shares the copy; removing one keeps it.
	tp2 := *got
	tp2.Name = "custom2"
	if err := st.Put(&tp2); err != nil {
		t.Fatal(err)
	}
	if err := st.Remove("custom"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cp); err != nil {
		t.Errorf("the copy another template uses was removed: %v", err)
	}
	// A changed copy makes the template unusable, and says so.
	if err := os.WriteFile(cp, []byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get("custom2"); err == nil || !strings.Contains(err.Error(), "not the "+tp.SeccompSHA256) || !strings.Contains(err.Error(), "airlock template rm custom2") {
		t.Errorf("Get with a changed profile copy: %v", err)
	}
	if err := st.Remove("custom2"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cp); !os.IsNotExist(err) {
		t.Errorf("the last template's profile copy was kept: %v", err)
	}

	// Replacing keeps the old copy (a run may have just read the old
	// template) until the next Remove.
	if err := st.Put(mustNew(t, "custom", runner.Spec{SeccompProfile: profileFile(t)})); err != nil {
		t.Fatal(err)
	}
	if err := st.Replace(mustNew(t, "custom", runner.Spec{})); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cp); err != nil {
		t.Errorf("Replace removed the old template's profile copy: %v", err)
	}
	if err := st.Put(mustNew(t, "x", runner.Spec{})); err != nil {
		t.Fatal(err)
	}
	if err := st.Remove("x"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cp); !os.IsNotExist(err) {
		t.Errorf("a Remove kept a profile copy no template names: %v", err)
	}
}

func TestStoreConcurrentPut(t *testing.T) {
	st := Open(t.TempDir())
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	tps := make([]*Template, n)
	for i := range n {
		tps[i] = mustNew(t, "race", runner.Spec{Env: []string{"I=" + string(rune('a'+i))}})
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = st.Put(tps[i])
		}()
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Errorf("Puts %d and %d both succeeded", won, i)
		case err == nil:
			won = i
		case !errdefs.IsAlreadyExists(err):
			t.Errorf("Put %d: %v", i, err)
		}
	}
	got, err := st.Get("race")
	if won < 0 || err != nil || got.Version() != tps[won].Version() {
		t.Errorf("winner %d, stored %v, %v", won, got, err)
	}
	// Concurrent Replaces leave one whole template.
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = st.Replace(tps[i])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Replace %d: %v", i, err)
		}
	}
	if _, err := st.Get("race"); err != nil {
		t.Error(err)
	}
}
