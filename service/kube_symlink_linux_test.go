package service

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The transfer scripts a cluster sandbox's sh runs, here run by the
// host's sh on a tree under /tmp: a symlink at any component below /tmp
// (or /home/user) is refused with exit 67, not only at the last one, so
// that "a" -> elsewhere never lets a/passwd be read, written, made or
// listed through it.
func TestKubeScriptsRefuseSymlinkOnTheWay(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "airlock-kube-scripts-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	real := filepath.Join(dir, "real")
	if err := os.MkdirAll(filepath.Join(real, "inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(real, "secret.txt"), []byte("secret\n"), 0o644)
	os.Mkdir(filepath.Join(dir, "d"), 0o755)
	os.Symlink(real, filepath.Join(dir, "a"))      // a middle component
	os.Symlink(real, filepath.Join(dir, "d/deep")) // a deeper one

	run := func(script string, stdin string, args ...string) (int, string) {
		cmd := exec.Command("sh", append([]string{"-c", script, "airlock-cp"}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatalf("running sh: %v", err)
		}
		return 0, string(out)
	}
	for _, via := range []string{filepath.Join(dir, "a"), filepath.Join(dir, "d/deep")} {
		for _, c := range []struct {
			what, script string
			args         []string
		}{
			{"download", downloadScript, []string{via + "/secret.txt"}},
			{"upload of a new file", uploadScript, []string{via + "/new.txt"}},
			{"upload over a file", uploadScript, []string{via + "/secret.txt"}},
			{"mkdir", mkdirScript, []string{via + "/made"}},
			{"mkdir -p", mkdirScript, []string{via + "/made/deeper", "-p"}},
			{"mkdir of a directory there", mkdirScript, []string{via + "/inner"}},
			{"listing", listScript, []string{via + "/inner"}},
		} {
			if code, out := run(c.script, "owned\n", c.args...); code != cpSymlink {
				t.Errorf("%s through %s: exit %d, output %q; want %d", c.what, via, code, out, cpSymlink)
			}
		}
		if code, _ := run(isDirScript, "", via+"/inner"); code == 0 {
			t.Errorf("is-dir of %s/inner: a directory; want not, through a symlink", via)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(real, "secret.txt")); string(b) != "secret\n" {
		t.Errorf("the file behind the link was written: %q", b)
	}
	for _, n := range []string{"new.txt", "made"} {
		if _, err := os.Lstat(filepath.Join(real, n)); err == nil {
			t.Errorf("%s was made behind the link", n)
		}
	}

	// Paths without a link still work.
	if code, out := run(downloadScript, "", real+"/secret.txt"); code != 0 || out != "secret\n" {
		t.Errorf("download of a plain path: exit %d, %q", code, out)
	}
	if code, _ := run(uploadScript, "hi\n", dir+"/d/up.txt"); code != 0 {
		t.Errorf("upload to a plain path: exit %d", code)
	}
	if code, _ := run(mkdirScript, "", dir+"/d/x/y", "-p"); code != 0 {
		t.Errorf("mkdir -p of a plain path: exit %d", code)
	}
	if code, _ := run(isDirScript, "", real+"/inner"); code != 0 {
		t.Errorf("is-dir of a plain directory: exit %d", code)
	}
	if code, out := run(listScript, "", real); code != 0 || !strings.Contains(out, "f"+real+"/secret.txt\x00") {
		t.Errorf("listing of a plain directory: exit %d, %q", code, out)
	}
}

// The workspace or /tmp itself, made a symlink by the image, is refused
// too: a tree transfer of it does not walk through the link (here to
// /etc). Run in a private mount namespace with a tmpfs on /home.
func TestKubeScriptsRefuseASymlinkedWorkspaceRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a mount namespace")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare")
	}
	const setup = `mount --make-rprivate / && mount -t tmpfs tmpfs /home && ln -s /etc /home/user && exec sh -c "$0" airlock-cp "$@"`
	run := func(script string, args ...string) int {
		cmd := exec.Command("unshare", append([]string{"-m", "sh", "-c", setup, script}, args...)...)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		} else if err != nil {
			t.Fatalf("unshare: %v: %s", err, out)
		}
		return 0
	}
	if code := run(isDirScript, "/home/user"); code == 0 {
		t.Errorf("is-dir of /home/user, a symlink to /etc: exit 0 (a directory); want not")
	}
	if code := run(listScript, "/home/user"); code != cpSymlink {
		t.Errorf("listing of /home/user, a symlink to /etc: exit %d; want %d (symlink refused)", code, cpSymlink)
	}
}
