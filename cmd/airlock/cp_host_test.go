package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/runner"
)

// otherUID is an unprivileged user who is neither root nor the caller.
const otherUID = 4242

func needRootForChown(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a symlink to another user")
	}
}

// plantOthersSymlink makes dir/name a symlink to target owned by otherUID,
// as another local user would plant it in a shared directory.
func plantOthersSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, otherUID, otherUID); err != nil {
		t.Fatal(err)
	}
}

func fetchText(body string) func(io.Writer) (runner.Transfer, error) {
	return func(w io.Writer) (runner.Transfer, error) {
		_, err := io.WriteString(w, body)
		return runner.Transfer{Direction: runner.DirectionDownload, Decision: runner.DecisionAccepted, Size: int64(len(body))}, err
	}
}

// A one-file download never writes through a symlink another user planted
// on the way to DST (a shared /tmp directory pointing at /etc/profile.d,
// say), whether DST names the directory or a file in it; the tree
// download of the same DST is refused too.
func TestCpDownloadRefusesOthersSymlink(t *testing.T) {
	needRootForChown(t)
	dir := t.TempDir()
	victim := filepath.Join(dir, "etc-profile.d") // stands for /etc/profile.d, /root/.ssh …
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(dir, "shared") // stands for /tmp/shared, planted by uid 4242
	plantOthersSymlink(t, victim, shared)

	// The tree download refuses this destination: the reference behaviour.
	_, terr := downloadTree("/home/user/proj", shared, func(string, runner.TreeSink) (runner.TreeSummary, error) {
		return runner.TreeSummary{}, nil
	})
	if terr == nil {
		t.Errorf("tree download into %s (another user's symlink) was not refused", shared)
	}

	for _, dst := range []string{shared, filepath.Join(shared, "setup.sh")} {
		_, err := downloadTo(dst, "/home/user/setup.sh", fetchText("echo pwned\n"))
		if _, serr := os.Lstat(filepath.Join(victim, "setup.sh")); serr == nil {
			t.Errorf("airlock cp ID:/home/user/setup.sh %s (err %v) wrote %s through uid %d's symlink", dst, err, filepath.Join(victim, "setup.sh"), otherUID)
			os.Remove(filepath.Join(victim, "setup.sh"))
		}
	}
}

// A refused one-file download leaves nothing and removes nothing by name:
// the bytes went to a temporary file in the directory as first opened, so
// a directory swapped for a symlink while the sandbox's file was read
// (its size, and so the time, is the sandbox's) cannot turn the clean-up
// onto a file elsewhere.
func TestCpRefusedDownloadRemovesNothingByName(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	precious := filepath.Join(victim, "out.csv")
	if err := os.WriteFile(precious, []byte("root's data\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work") // another user's directory in /tmp
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	fetch := func(w io.Writer) (runner.Transfer, error) {
		io.WriteString(w, "<html>")
		// While the sandbox's file is read (its size is the sandbox's to
		// choose), the owner of work swaps it.
		if err := os.Rename(work, work+".old"); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, work); err != nil {
			t.Fatal(err)
		}
		return runner.Transfer{}, &runner.TransferError{Direction: runner.DirectionDownload, Path: "/home/user/out.csv",
			Reason: artifacts.ReasonTypeNotAllowed, Detail: "content is text/html", Err: errdefs.ErrInvalidArgument}
	}
	_, err := downloadTo(filepath.Join(work, "out.csv"), "/home/user/out.csv", fetch)
	if _, serr := os.Stat(precious); serr != nil {
		t.Errorf("a refused download (%v) removed %s, reached through a symlink swapped in after the create: %v", err, precious, serr)
	}
}

// A one-file copy refused for what it meets on this machine (DST exists,
// SRC is a symlink) exits 65 and prints the refusal under --json, as the
// sandbox's refusals and a tree's do (docs/exit-codes.md).
func TestCpHostRefusalExits65(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "copy.csv")
	if err := os.WriteFile(existing, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.csv")
	if err := os.Symlink(existing, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		do   func() (runner.Transfer, error)
	}{
		{"download onto an existing file (exists)", func() (runner.Transfer, error) {
			return downloadTo(existing, "/home/user/copy.csv", fetchText("x\n"))
		}},
		{"upload of a host symlink (symlink)", func() (runner.Transfer, error) {
			f, _, _, err := openUpload(link, "/home/user/")
			if f != nil {
				f.Close()
			}
			return runner.Transfer{}, err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, err := c.do()
			var out, errb bytes.Buffer
			cmd := &cobra.Command{}
			cmd.SetOut(&out)
			cmd.SetErr(&errb)
			rerr := reportTransfer(cmd, tr, err, cpFlags{json: true})
			var m map[string]any
			jerr := json.Unmarshal(out.Bytes(), &m)
			if code := exitCode(rerr); code != exitRefused || jerr != nil {
				t.Errorf("exit %d (err %v), stdout %q; want exit 65 and the refusal as JSON", code, rerr, out.String())
			}
		})
	}
}

// Labels are any client's text: one with control characters is refused
// as invalid input, and sandbox ls escapes what a record holds (bidi
// controls, which a label may carry; a record an older airlock wrote),
// so that a label cannot drive the terminal.
func TestSandboxLsEscapesLabels(t *testing.T) {
	hostile := "\x1b]0;pwned\x07\x1b[2J\r\u202egnp.exe"
	f := newFaces(t)
	body, _ := json.Marshal(map[string]any{"labels": map[string]string{"agent": hostile}})
	if got := f.http(string(body)); got.policy != nil || got.kind != "invalid_input" {
		t.Errorf("the API took a label with control characters: %s: %s", got.kind, got.msg)
	}

	root := t.TempDir()
	id := "sb-0804d69789f28334e665"
	si := runner.SandboxInfo{ID: id, Engine: "oci", Isolation: "gvisor", Labels: map[string]string{"agent": hostile}}
	b, _ := json.Marshal(si)
	if err := os.MkdirAll(filepath.Join(root, "sandboxes"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "sandboxes", id+".json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	// Its lifecycle record says ready, as a live sandbox's does.
	if err := os.MkdirAll(filepath.Join(root, "state"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "state", id+".json"), []byte(`{"id":"`+id+`","state":"ready"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := newSandboxLsCmd(&globals{root: root, stderr: io.Discard})
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), id) {
		t.Fatalf("ls did not list the sandbox: %q", out.String())
	}
	if strings.ContainsAny(out.String(), "\x1b\x07\r\u202e") {
		t.Errorf("sandbox ls wrote control sequences from a label: %q", out.String())
	}
}
