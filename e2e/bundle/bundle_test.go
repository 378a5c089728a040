//go:build e2e

// Package bundle proves the offline install end to end: `make bundle` on
// this (connected) host, then install.sh into a fresh prefix and root
// inside a network namespace with no interface up and a PATH with no go,
// apt-get or docker, a Python job on the installed default image, and
// `airlock doctor` for the oci engine, all still without network. Every
// file of the bundle, changed by one byte, is refused by name. It is its
// own package so that `make test` runs it once, not once per engine pair.
package bundle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/imagetest"
	"github.com/airlock-sandbox/airlock/runner"
)

// hostTools are the only commands on PATH inside the offline namespace:
// what install.sh and airlock use, and nothing that could fetch.
var hostTools = []string{
	"bash", "sh", "env", "cat", "cp", "mv", "rm", "mkdir", "mktemp", "install", "ln", "chmod",
	"dirname", "basename", "id", "date", "head", "tail", "cut", "sort", "tr", "wc", "sed", "grep",
	"awk", "find", "cmp", "stat", "sha256sum", "openssl", "ldd", "sleep", "kill",
}

type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// offline runs argv in a new network namespace (no interface up) with
// PATH holding only tools, and DOCKER_HOST pointing nowhere, so that
// nothing reaches the host's dockerd through its socket either.
func offline(t *testing.T, tools string, argv ...string) result {
	t.Helper()
	return offlineWith(t, tools, "unix:///nonexistent/docker.sock", argv...)
}

// offlineWith is offline with DOCKER_HOST set to dockerHost (a unix
// socket reaches across network namespaces).
func offlineWith(t *testing.T, tools, dockerHost string, argv ...string) result {
	t.Helper()
	args := append([]string{"--net", "--", "env", "-i", "PATH=" + tools, "HOME=/root", "LANG=C.UTF-8",
		"TMPDIR=" + os.TempDir(), "DOCKER_HOST=" + dockerHost}, argv...)
	return runCmd(exec.Command("unshare", args...))
}

func runCmd(cmd *exec.Cmd) result {
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	r := result{stdout: so.String(), stderr: se.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		r.code, r.stderr = -1, r.stderr+err.Error()
	}
	return r
}

func mustRun(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	r := runCmd(cmd)
	if r.code != 0 {
		t.Fatalf("%s: %s", strings.Join(cmd.Args, " "), r)
	}
	return r.stdout
}

// flip changes one byte of path at off (negative: from the end) and
// returns a func that puts it back.
func flip(t *testing.T, path string, off int64) func() {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	if off < 0 {
		off += fi.Size()
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	orig := b[0]
	if _, err := f.WriteAt([]byte{orig ^ 0x01}, off); err != nil {
		t.Fatal(err)
	}
	return func() {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte{orig}, off); err != nil {
			t.Fatal(err)
		}
	}
}

type imageRow struct {
	Ref      string `json:"ref"`
	ID       string `json:"id"`
	Manifest string `json:"manifest"`
	InStore  bool   `json:"in_store"`
	Default  bool   `json:"default"`
}

func imageLs(t *testing.T, r result) []imageRow {
	t.Helper()
	var rows []imageRow
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rows) != nil {
		t.Fatalf("image ls --json: %s", r)
	}
	return rows
}

// built is the bundle made by `make bundle` on this host, carried
// (unpacked) elsewhere, and the offline PATH it is installed with.
type built struct {
	bundle     string // the unpacked bundle
	installSh  string
	pub        string // the bundle key's public half
	tools      string // the offline PATH
	defaultRef string // the default image and the extra bundled one
	busybox    string
}

var (
	buildOnce sync.Once
	theBundle built
	buildErr  string
	scratch   string
)

// TestMain gives the tests one scratch directory, so the bundle is built
// once for the package.
func TestMain(m *testing.M) {
	var err error
	if scratch, err = os.MkdirTemp("", "airlock-bundle-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(scratch)
	os.Exit(code)
}

// theBuild builds the bundle on first use; every test shares it. A build
// that fails fails the test that ran it, and every later one.
func theBuild(t *testing.T) built {
	t.Helper()
	buildOnce.Do(func() {
		buildErr = "building the bundle failed (see the first test that asked for it)"
		theBundle = build(t, scratch)
		buildErr = ""
	})
	if buildErr != "" {
		t.Fatal(buildErr)
	}
	return theBundle
}

func build(t *testing.T, tmp string) built {
	t.Helper()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	sysRoot := os.Getenv("AIRLOCK_ROOT")
	if sysRoot == "" {
		sysRoot = runner.DefaultRoot
	}

	// The build host's root: setup's store and runsc, its default image,
	// and a bundle key of its own.
	buildRoot := filepath.Join(tmp, "build-root")
	if err := os.MkdirAll(filepath.Join(buildRoot, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"store", "tools"} {
		if err := os.Symlink(filepath.Join(sysRoot, d), filepath.Join(buildRoot, d)); err != nil {
			t.Fatal(err)
		}
	}
	lock, err := os.ReadFile(filepath.Join(sysRoot, "images", "default.lock"))
	if err != nil {
		t.Fatalf("no default image (run `make setup`): %v", err)
	}
	if err := os.WriteFile(filepath.Join(buildRoot, "images", "default.lock"), lock, 0o644); err != nil {
		t.Fatal(err)
	}
	hostBin := filepath.Join(tmp, "airlock")
	mustRun(t, exec.Command("go", "build", "-o", hostBin, filepath.Join(repo, "cmd", "airlock")))
	defaultRef := strings.TrimSpace(mustRun(t, exec.Command(hostBin, "--root", buildRoot, "image", "default")))
	layoutDir := filepath.Join(tmp, "busybox-oci")
	if err := imagetest.BusyboxLayout(layoutDir); err != nil {
		t.Fatal(err)
	}
	imp := exec.Command(hostBin, "--root", buildRoot, "image", "import", "--name", "airlock-e2e/bundled", layoutDir)
	imp.Env = append(os.Environ(), "DOCKER_HOST=unix:///nonexistent/docker.sock")
	busybox := strings.TrimSpace(mustRun(t, imp))

	// The target's PATH: a few host tools, and no go, apt-get or docker.
	tools := filepath.Join(tmp, "tools")
	if err := os.MkdirAll(tools, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range hostTools {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Fatalf("this host lacks %s: %v", name, err)
		}
		if err := os.Symlink(p, filepath.Join(tools, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"go", "apt-get", "docker", "dockerd", "curl", "wget"} {
		if r := offline(t, tools, "bash", "-c", "command -v "+name); r.code == 0 {
			t.Fatalf("%s is on the offline PATH: %s", name, r.stdout)
		}
	}
	// No interface but lo, and no route.
	if r := offline(t, tools, "cat", "/proc/net/dev"); r.code != 0 || strings.Count(r.stdout, ":") != 1 || !strings.Contains(r.stdout, " lo:") {
		t.Fatalf("the offline namespace has an interface besides lo: %s", r)
	}
	if r := offline(t, tools, "cat", "/proc/net/route", "/proc/net/if_inet6"); r.code != 0 || strings.Count(r.stdout, "\n") > 1 {
		t.Fatalf("the offline namespace has an address or a route (an interface is up): %s", r)
	}

	// Build.
	dist := filepath.Join(tmp, "dist")
	start := time.Now()
	out := mustRun(t, exec.Command("make", "-C", repo, "--no-print-directory", "bundle",
		"AIRLOCK_ROOT="+buildRoot, "DIST="+dist, "BUNDLE_IMAGES="+busybox))
	buildTime := time.Since(start)
	tarballs, _ := filepath.Glob(filepath.Join(dist, "airlock-*-linux-*.tar.gz"))
	pubs, _ := filepath.Glob(filepath.Join(dist, "airlock-*-linux-*.pub"))
	if len(tarballs) != 1 || len(pubs) != 1 {
		t.Fatalf("make bundle made %v and %v, want one tarball and one key:\n%s", tarballs, pubs, out)
	}
	fi, err := os.Stat(tarballs[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bundle %s: %.1f MiB, built in %s", filepath.Base(tarballs[0]), float64(fi.Size())/(1<<20), buildTime.Round(time.Second))
	fmt.Fprintf(os.Stderr, "e2e bundle: %d bytes (%.1f MiB), make bundle took %s\n", fi.Size(), float64(fi.Size())/(1<<20), buildTime.Round(time.Second))
	pub := pubs[0]

	// Carry: unpack it elsewhere.
	carried := filepath.Join(tmp, "carried")
	if err := os.MkdirAll(carried, 0o755); err != nil {
		t.Fatal(err)
	}
	mustRun(t, exec.Command("tar", "--no-same-owner", "--no-same-permissions", "-xzf", tarballs[0], "-C", carried))
	ents, _ := os.ReadDir(carried)
	if len(ents) != 1 {
		t.Fatalf("the tarball holds %d top-level entries, want one directory", len(ents))
	}
	bundle := filepath.Join(carried, ents[0].Name())
	installSh := filepath.Join(bundle, "install.sh")

	return built{bundle: bundle, installSh: installSh, pub: pub, tools: tools, defaultRef: defaultRef, busybox: busybox}
}

func TestBundle(t *testing.T) {
	b := theBuild(t)
	tmp, bundle, installSh, pub, tools, defaultRef, busybox := t.TempDir(), b.bundle, b.installSh, b.pub, b.tools, b.defaultRef, b.busybox
	prefix, root := filepath.Join(tmp, "prefix"), filepath.Join(tmp, "root")
	defer cleanup(t, root) // even when a refusal failed and installed
	install := func(args ...string) result {
		return offline(t, tools, append([]string{"bash", installSh, "--prefix", prefix, "--root", root}, args...)...)
	}
	refused := func(t *testing.T, r result, names ...string) {
		t.Helper()
		if r.code == 0 {
			t.Fatalf("installed anyway: %s", r)
		}
		for _, n := range names {
			if !strings.Contains(r.stderr, n) {
				t.Errorf("the refusal does not name %q: %s", n, r)
			}
		}
		if _, err := os.Stat(filepath.Join(prefix, "bin", "airlock")); err == nil {
			t.Fatalf("a refused bundle installed %s", filepath.Join(prefix, "bin", "airlock"))
		}
	}

	t.Run("refuses a root others can change", func(t *testing.T) {
		open := filepath.Join(tmp, "open")
		if err := os.Mkdir(open, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(open, 0o777); err != nil {
			t.Fatal(err)
		}
		r := offline(t, tools, "bash", installSh, "--prefix", prefix, "--root", filepath.Join(open, "root"))
		refused(t, r, open, "can be changed by a user other than root")
		// A symlink on the way counts where it is, not only where it leads.
		safe := filepath.Join(tmp, "safe")
		if err := os.Mkdir(safe, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(safe, filepath.Join(open, "link")); err != nil {
			t.Fatal(err)
		}
		r = offline(t, tools, "bash", installSh, "--prefix", prefix, "--root", filepath.Join(open, "link", "root"))
		refused(t, r, open, "can be changed by a user other than root")
		sticky := filepath.Join(tmp, "sticky")
		if err := os.Mkdir(sticky, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(sticky, 0o777|os.ModeSticky); err != nil {
			t.Fatal(err)
		}
		theirs := filepath.Join(sticky, "link")
		if err := os.Symlink(safe, theirs); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(theirs, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		r = offline(t, tools, "bash", installSh, "--prefix", prefix, "--root", filepath.Join(theirs, "root"))
		refused(t, r, theirs, "a symlink owned by uid 65534")
		r = offline(t, tools, "bash", installSh, "--prefix", prefix, "--root", filepath.Join(tmp, "a$b"))
		refused(t, r, "use letters, digits")
	})

	t.Run("refuses a changed byte in any file", func(t *testing.T) {
		sums, err := os.ReadFile(filepath.Join(bundle, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		files := []string{"SHA256SUMS", "SHA256SUMS.sig"}
		for _, l := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
			files = append(files, strings.TrimSpace(l[64:]))
		}
		for _, want := range []string{"install.sh", "bin/airlock", "tools/runsc", "images/default.tar", "images/image-1.tar", "images/images.txt", "deps.txt", "bundle.pub"} {
			if !strings.Contains(string(sums), "  "+want+"\n") {
				t.Errorf("SHA256SUMS does not list %s:\n%s", want, sums)
			}
		}
		for _, f := range files {
			p := filepath.Join(bundle, f)
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			off := fi.Size() / 2
			if f == "install.sh" {
				off = int64(len("#!/usr/bin/env bash\n# inst")) // a letter of its first comment, so it still runs
			}
			restore := flip(t, p, off)
			r := install("--key", pub)
			restore()
			refused(t, r, f)
			t.Logf("%s changed: %s", f, strings.TrimSpace(r.stderr))
		}
	})

	// The documented install verifies with the target's own tools before
	// it runs anything of the bundle's: install.sh cannot vouch for itself.
	t.Run("the documented checks refuse an install.sh that verifies nothing", func(t *testing.T) {
		check := func() error {
			c := exec.Command("sh", "-c", `openssl pkeyutl -verify -pubin -inkey "$1" -rawin -in SHA256SUMS -sigfile SHA256SUMS.sig && sha256sum --quiet -c SHA256SUMS`, "sh", pub)
			c.Dir = bundle
			if out, err := c.CombinedOutput(); err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}
		if err := check(); err != nil {
			t.Fatalf("the genuine bundle fails the documented checks: %v", err)
		}
		p := filepath.Join(bundle, "install.sh")
		orig, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		defer os.WriteFile(p, orig, 0o755)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n# installs whatever it carries, checking nothing\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := check(); err == nil {
			t.Error("an install.sh that verifies nothing passes the documented checks")
		} else {
			t.Logf("refused: %v", err)
		}
	})

	t.Run("refuses a file not listed", func(t *testing.T) {
		extra := filepath.Join(bundle, "bin", "extra")
		if err := os.WriteFile(extra, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(extra)
		refused(t, install("--key", pub), "bin/extra", "not listed")
	})

	t.Run("refuses a wrong signature or another key", func(t *testing.T) {
		other := filepath.Join(tmp, "other.key")
		mustRun(t, exec.Command("openssl", "genpkey", "-algorithm", "ed25519", "-out", other))
		otherPub := filepath.Join(tmp, "other.pub")
		mustRun(t, exec.Command("openssl", "pkey", "-in", other, "-pubout", "-out", otherPub))
		sig := filepath.Join(bundle, "SHA256SUMS.sig")
		good, err := os.ReadFile(sig)
		if err != nil {
			t.Fatal(err)
		}
		mustRun(t, exec.Command("openssl", "pkeyutl", "-sign", "-inkey", other, "-rawin",
			"-in", filepath.Join(bundle, "SHA256SUMS"), "-out", sig))
		r := install("--key", pub)
		if err := os.WriteFile(sig, good, 0o644); err != nil {
			t.Fatal(err)
		}
		refused(t, r, "SHA256SUMS", "does NOT verify")
		// The true signature, but the operator trusts another key.
		refused(t, install("--key", otherPub), "SHA256SUMS", "does NOT verify")
		// No key and no terminal: the bundle's own key is not trusted blindly.
		r = install()
		refused(t, r, "--key")
		fp := mustRun(t, exec.Command("bash", "-c", `openssl pkey -pubin -in "$1" -outform DER | sha256sum | cut -d' ' -f1`, "-", pub))
		if !strings.Contains(r.stdout, "SHA256:"+strings.TrimSpace(fp)) {
			t.Errorf("the key's fingerprint %s is not printed: %s", fp, r)
		}
		// On a terminal the operator confirms the fingerprint: anything but
		// yes refuses; yes trusts the bundle's key, and the files are still
		// checked (here a changed one is found).
		onTTY := func(answer string) result {
			cmd := exec.Command("script", "-qec", strings.Join([]string{"bash", installSh, "--prefix", prefix, "--root", root}, " "), "/dev/null")
			cmd.Stdin = strings.NewReader(answer + "\n")
			return runCmd(cmd)
		}
		if r := onTTY("no"); r.code == 0 || !strings.Contains(r.stdout, "SHA256:"+strings.TrimSpace(fp)) || !strings.Contains(r.stdout, "key not confirmed") {
			t.Errorf("answered no: %s", r)
		}
		restore := flip(t, filepath.Join(bundle, "deps.txt"), 0)
		r = onTTY("yes")
		restore()
		if r.code == 0 || !strings.Contains(r.stdout, "signature verified") || !strings.Contains(r.stdout, "deps.txt: sha256") {
			t.Errorf("answered yes, deps.txt changed: %s", r)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	// Install, with no network, then again: nothing changes.
	r := install("--key", pub)
	t.Logf("install.sh:\n%s%s", r.stdout, r.stderr)
	if r.code != 0 || !strings.Contains(r.stdout, "no dockerd: the oci engine needs nothing more") {
		t.Fatalf("install.sh: %s", r)
	}
	r = install("--key", pub)
	if r.code != 0 || !strings.Contains(r.stdout, "default image present") || strings.Count(r.stdout, "unchanged") != 4 { // runsc, the exec agent, airlock, its wrapper
		t.Fatalf("install.sh again: %s", r)
	}
	airlock := filepath.Join(prefix, "bin", "airlock")

	t.Run("runs the default image's Python job on the oci engine", func(t *testing.T) {
		r := offline(t, tools, airlock, "run", "--engine", "oci", "--",
			"python3", "-c", "import numpy; print('sum', int(numpy.arange(10).sum()))")
		if r.code != 0 || strings.TrimSpace(r.stdout) != "sum 45" {
			t.Fatalf("run: %s", r)
		}
		t.Logf("run: %s", r)
	})
	t.Run("doctor passes for the oci engine", func(t *testing.T) {
		r := offline(t, tools, airlock, "doctor", "--engine", "oci")
		if r.code != 0 || !strings.Contains(r.stdout, "probe: limits enforced  ok") || !strings.Contains(r.stdout, "probe: no network       ok") {
			t.Fatalf("doctor: %s", r)
		}
		t.Logf("doctor: %s", r)
	})

	rows := imageLs(t, offline(t, tools, airlock, "image", "ls", "--json"))
	byID := map[string]imageRow{}
	for _, row := range rows {
		byID[row.ID] = row
	}
	defaultID, busyboxID := defaultRef[strings.Index(defaultRef, "@")+1:], busybox[strings.Index(busybox, "@")+1:]
	if d := byID[defaultID]; !d.InStore || !d.Default || d.Ref != defaultRef {
		t.Errorf("the default image %s is not installed as the default: %+v", defaultRef, rows)
	}
	if b := byID[busyboxID]; !b.InStore || b.Ref != busybox {
		t.Errorf("the bundled image %s is not installed: %+v", busybox, rows)
	}

	t.Run("export and import keep the digest", func(t *testing.T) {
		archive := filepath.Join(tmp, "roundtrip.tar")
		if r := offline(t, tools, airlock, "image", "export", defaultRef, "-o", archive); r.code != 0 {
			t.Fatalf("export: %s", r)
		}
		root2 := filepath.Join(tmp, "root2")
		if err := os.MkdirAll(root2, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(root, "tools"), filepath.Join(root2, "tools")); err != nil {
			t.Fatal(err)
		}
		defer cleanup(t, root2)
		al2 := func(args ...string) result {
			return offline(t, tools, append([]string{airlock, "--root", root2}, args...)...)
		}
		other := "sha256:" + strings.Repeat("0", 64)
		if r := al2("image", "import", "--require-digest", other, archive); r.code != 64 ||
			!strings.Contains(r.stderr, "--require-digest") || !strings.Contains(r.stderr, defaultID) {
			t.Errorf("import --require-digest %s: %s; want exit 64 naming both images", other, r)
		}
		if rows := imageLs(t, al2("image", "ls", "--json")); len(rows) != 0 {
			t.Errorf("a refused import left %+v", rows)
		}
		r := al2("image", "import", "--require-digest", defaultID, archive)
		if r.code != 0 || strings.TrimSpace(r.stdout) != defaultRef {
			t.Fatalf("import: %s; want %s", r, defaultRef)
		}
		got := imageLs(t, al2("image", "ls", "--json"))
		if len(got) != 1 || got[0].ID != defaultID || got[0].Manifest != byID[defaultID].Manifest {
			t.Errorf("imported %+v, want id %s manifest %s", got, defaultID, byID[defaultID].Manifest)
		}
		r = al2("run", "--engine", "oci", "--image", defaultRef, "--", "python3", "-c", "import numpy; print(numpy.__name__)")
		if r.code != 0 || strings.TrimSpace(r.stdout) != "numpy" {
			t.Fatalf("run on the imported image: %s", r)
		}

		// Several images in one layout: --require-digest picks one.
		multi := filepath.Join(tmp, "multi.tar")
		if r := offline(t, tools, airlock, "image", "export", busybox, defaultRef, "-o", multi); r.code != 0 {
			t.Fatalf("export of two: %s", r)
		}
		if r := al2("image", "import", multi); r.code != 64 || !strings.Contains(r.stderr, "--require-digest") {
			t.Errorf("import of two without --require-digest: %s; want 64 pointing at --require-digest", r)
		}
		if r := al2("image", "import", "--require-digest", busyboxID, multi); r.code != 0 || strings.TrimSpace(r.stdout) != busybox {
			t.Errorf("import --require-digest %s of two: %s", busyboxID, r)
		}
	})
}

// cleanup checks that nothing of root's runs is left, after dropping the
// one network namespace runsc keeps bound per state root.
func cleanup(t *testing.T, root string) {
	t.Helper()
	state := filepath.Join(root, "oci", "runsc")
	if _, err := os.Stat(state); err == nil {
		out, err := exec.Command(filepath.Join(root, "tools", "runsc"), "--root", state, "list", "--quiet").Output()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("runsc containers left under %s: %q (%v)", root, out, err)
		}
	}
	for syscall.Unmount(filepath.Join(state, "null-netns"), syscall.MNT_DETACH) == nil {
	}
	if runs, _ := os.ReadDir(filepath.Join(root, "runs")); len(runs) > 0 {
		t.Errorf("run directories left under %s: %d", root, len(runs))
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(mi, []byte(root+"/")) {
		t.Errorf("mounts left under %s", root)
	}
}
