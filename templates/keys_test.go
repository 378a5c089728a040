package templates

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/runner"
)

// A template file is read as written, as jq or an editor shows it: a
// field's name in another case, or a key given twice (encoding/json takes
// the last), is refused with the file, the key and the fix.
func TestStoreReadsTemplateFileKeysAsWritten(t *testing.T) {
	root := t.TempDir()
	st := Open(root)
	if err := st.Put(mustNew(t, "py", runner.Spec{})); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "templates", "py.json")
	orig := readFile(t, file)
	if !strings.Contains(orig, `"memory": "512MiB",`) {
		t.Fatalf("the test's premise is wrong: %s", orig)
	}
	for key, edit := range map[string]string{
		"Memory": `"Memory": "512MiB",`,
		"memory": `"memory": "64MiB", "memory": "512MiB",`,
	} {
		if err := os.WriteFile(file, []byte(strings.Replace(orig, `"memory": "512MiB",`, edit, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := st.Get("py")
		if !errdefs.IsDataLoss(err) {
			t.Fatalf("%s: Get = %v; want the file refused", edit, err)
		}
		for _, want := range []string{file, key + " ", "edit the file", "airlock template create py"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v; want it to name %q", edit, err, want)
			}
		}
	}
}

// A template file whose profile key is given twice keeps every profile
// copy: the one it names as written may be the one it is fixed back to.
func TestCollectKeepsProfilesOfFileWithKeyTwice(t *testing.T) {
	root := t.TempDir()
	st := Open(root)
	tp := mustNew(t, "custom", runner.Spec{SeccompProfile: profileFile(t)})
	if err := st.Put(tp); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "templates", "custom.json")
	named := `"seccomp_profile_sha256": "` + tp.SeccompSHA256 + `"`
	if err := os.WriteFile(file, []byte(strings.Replace(readFile(t, file), named, named+`, "seccomp_profile_sha256": ""`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(mustNew(t, "x", runner.Spec{})); err != nil {
		t.Fatal(err)
	}
	if err := st.Remove("x"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(profilePath(st.Dir(), tp.SeccompSHA256)); err != nil {
		t.Errorf("the profile copy the file names first was removed: %v", err)
	}
}
