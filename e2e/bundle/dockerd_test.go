//go:build e2e

package bundle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// privateDockerd is a dockerd of the test's own: its own daemon.json,
// data, exec root (and so its own containerd), socket and pid file, with
// no bridge and no iptables, so that it touches neither the host's dockerd
// nor its networking.
type privateDockerd struct {
	dir, sock, pidfile, config string
	cmd                        *exec.Cmd
	cli                        *http.Client
}

func (d *privateDockerd) host() string { return "unix://" + d.sock }

func startDockerd(t *testing.T) *privateDockerd {
	t.Helper()
	if _, err := exec.LookPath("dockerd"); err != nil {
		t.Fatalf("this host has no dockerd: %v", err)
	}
	// Short: containerd's sockets live under the exec root.
	dir, err := os.MkdirTemp("", "ald-")
	if err != nil {
		t.Fatal(err)
	}
	d := &privateDockerd{dir: dir, sock: filepath.Join(dir, "docker.sock"), pidfile: filepath.Join(dir, "docker.pid"), config: filepath.Join(dir, "daemon.json")}
	if err := os.WriteFile(d.config, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	d.cmd = exec.Command("dockerd", "--config-file", d.config, "--data-root", filepath.Join(dir, "data"),
		"--exec-root", filepath.Join(dir, "exec"), "--host", d.host(), "--pidfile", d.pidfile,
		"--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-forward=false", "--ip-masq=false")
	d.cmd.Stdout, d.cmd.Stderr = log, log
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { d.cmd.Wait(); close(exited) }()
	t.Cleanup(func() { d.stop(t, exited) })
	d.cli = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.sock)
	}}}
	for deadline := time.Now().Add(2 * time.Minute); ; {
		if _, err := d.get("/_ping"); err == nil {
			break
		}
		select {
		case <-exited:
			t.Fatalf("the private dockerd exited: %s", d.logTail())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the private dockerd did not answer: %s", d.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return d
}

func (d *privateDockerd) logTail() string {
	b, _ := os.ReadFile(filepath.Join(d.dir, "dockerd.log"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

func (d *privateDockerd) stop(t *testing.T, exited chan struct{}) {
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		t.Errorf("the private dockerd did not stop on SIGTERM; killing it")
		syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
	// runsc keeps one network namespace bound per state root.
	for syscall.Unmount(filepath.Join(d.dir, "exec", "runtime-runc", "moby", "null-netns"), syscall.MNT_DETACH) == nil {
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), d.dir+"/") {
		t.Errorf("mounts left under %s", d.dir)
		return
	}
	os.RemoveAll(d.dir)
}

func (d *privateDockerd) get(path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker"+path, nil)
	resp, err := d.cli.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var b []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b = append(b, buf[:n]...)
		if err != nil {
			break
		}
	}
	if resp.StatusCode != http.StatusOK {
		return b, fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	return b, nil
}

// entry is a runtime in daemon.json, or in dockerd's info.
type entry struct {
	Path string   `json:"path"`
	Args []string `json:"runtimeArgs"`
}

// runtimes is what dockerd has loaded.
func (d *privateDockerd) runtimes(t *testing.T) map[string]entry {
	t.Helper()
	b, err := d.get("/info")
	if err != nil {
		t.Fatal(err)
	}
	var info struct{ Runtimes map[string]entry }
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatal(err)
	}
	return info.Runtimes
}

// waitRuntime waits until dockerd has loaded runtime name as want.
func (d *privateDockerd) waitRuntime(t *testing.T, name string, want entry) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		got, ok := d.runtimes(t)[name]
		if ok && reflect.DeepEqual(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("dockerd's runtime %q is %+v (loaded: %v), want %+v", name, got, ok, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// configured is daemon.json's runtimes.
func (d *privateDockerd) configured(t *testing.T) map[string]entry {
	t.Helper()
	b, err := os.ReadFile(d.config)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct{ Runtimes map[string]entry }
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("%s: %v: %s", d.config, err, b)
	}
	return cfg.Runtimes
}

// setRuntime writes runtime name into daemon.json as an installer would,
// and has dockerd load it.
func (d *privateDockerd) setRuntime(t *testing.T, name string, e entry) {
	t.Helper()
	b, _ := os.ReadFile(d.config)
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	rts, _ := cfg["runtimes"].(map[string]any)
	rts[name] = e
	if b, err := json.Marshal(cfg); err != nil || os.WriteFile(d.config, b, 0o644) != nil {
		t.Fatalf("writing %s: %v", d.config, err)
	}
	d.cmd.Process.Signal(syscall.SIGHUP)
	d.waitRuntime(t, name, e)
}

// airlockContainers are the containers of airlock's on the private dockerd.
func (d *privateDockerd) airlockContainers(t *testing.T) []string {
	t.Helper()
	b, err := d.get(`/containers/json?all=1&filters={"label":["airlock.id"]}`)
	if err != nil {
		t.Fatal(err)
	}
	var list []struct{ ID string }
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range list {
		ids = append(ids, c.ID)
	}
	return ids
}

func (d *privateDockerd) containerRuntime(t *testing.T, id string) string {
	t.Helper()
	b, err := d.get("/containers/" + id + "/json")
	if err != nil {
		t.Fatal(err)
	}
	var c struct{ HostConfig struct{ Runtime string } }
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c.HostConfig.Runtime
}

// runscArgs are the flags install-runtime writes for root.
func runscArgs(root string) []string {
	return []string{"--network=none", "--oci-seccomp", "--debug-log=" + root + "/sandbox-logs/%ID%/", "--debug-command=boot"}
}

type doctorReport struct {
	Checks []struct{ Name, Status, Detail, Fix string } `json:"checks"`
	OK     bool                                         `json:"ok"`
}

func doctorJSON(t *testing.T, r result) doctorReport {
	t.Helper()
	var rep doctorReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("doctor --json: %v: %s", err, r)
	}
	return rep
}

// failsNaming reports whether a row of rep FAILs naming every one of what.
func (rep doctorReport) failsNaming(what ...string) bool {
	for _, c := range rep.Checks {
		if c.Status == "FAIL" && !slices.ContainsFunc(what, func(w string) bool { return !strings.Contains(c.Detail, w) }) {
			return true
		}
	}
	return false
}

func (rep doctorReport) row(name string) string {
	for _, c := range rep.Checks {
		if c.Name == name {
			return fmt.Sprintf("%s %s (fix: %s)", c.Status, c.Detail, c.Fix)
		}
	}
	return "no row"
}

// withDockerd starts a private dockerd, and returns a scratch directory,
// a func that runs a command offline against that dockerd, and one that
// runs install.sh against it.
func withDockerd(t *testing.T) (*privateDockerd, string, func(...string) result, func(string, string, ...string) result) {
	t.Helper()
	b := theBuild(t)
	d := startDockerd(t)
	tmp := t.TempDir()
	// The offline PATH, plus dockerd (install.sh registers runsc only
	// where dockerd is installed) and mkfs.ext4 (sandboxes' workspaces).
	tools := filepath.Join(tmp, "tools")
	if err := os.Mkdir(tools, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range append(slices.Clone(hostTools), "dockerd", "mkfs.ext4") {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Fatalf("this host lacks %s: %v", name, err)
		}
		if err := os.Symlink(p, filepath.Join(tools, name)); err != nil {
			t.Fatal(err)
		}
	}
	run := func(argv ...string) result { return offlineWith(t, tools, d.host(), argv...) }
	install := func(prefix, root string, args ...string) result {
		return run(append([]string{"bash", b.installSh, "--prefix", prefix, "--root", root, "--key", b.pub,
			"--daemon-json", d.config, "--docker-pid", d.pidfile}, args...)...)
	}
	return d, tmp, run, install
}

// TestBundleDockerd installs two roots from the bundle against a private
// dockerd: the first registered as airlock-runsc, the second with no name
// given. The second must register a runtime of its own and leave the
// first's alone, the first must keep running on the docker engine once the
// second is gone, and doctor must catch a registration that runs another
// root's runsc, or a runsc that is not there.
func TestBundleDockerd(t *testing.T) {
	d, tmp, run, install := withDockerd(t)
	rootA, rootB, rootC := filepath.Join(tmp, "root-a"), filepath.Join(tmp, "root-b"), filepath.Join(tmp, "root-c")
	airlockA, airlockB := filepath.Join(tmp, "prefix-a", "bin", "airlock"), filepath.Join(tmp, "prefix-b", "bin", "airlock")
	defer cleanup(t, rootA)
	defer cleanup(t, rootB)
	defer func() {
		if ids := d.airlockContainers(t); len(ids) > 0 {
			t.Errorf("containers left on the private dockerd: %v", ids)
		}
	}()

	// A: the installation already here, under airlock-runsc.
	r := install(filepath.Join(tmp, "prefix-a"), rootA, "--runtime", "airlock-runsc")
	if r.code != 0 {
		t.Fatalf("install.sh --root %s: %s", rootA, r)
	}
	entryA := entry{Path: filepath.Join(rootA, "tools", "runsc"), Args: runscArgs(rootA)}
	d.waitRuntime(t, "airlock-runsc", entryA)

	// B: another root, no name given.
	r = install(filepath.Join(tmp, "prefix-b"), rootB)
	t.Logf("install.sh --root %s:\n%s%s", rootB, r.stdout, r.stderr)
	if r.code != 0 {
		t.Fatalf("install.sh --root %s: %s", rootB, r)
	}
	if got := d.configured(t)["airlock-runsc"]; !reflect.DeepEqual(got, entryA) {
		t.Errorf("installing root B re-pointed airlock-runsc, root A's runtime, to %+v; want it left as %+v", got, entryA)
	}
	rec, err := os.ReadFile(filepath.Join(rootB, "docker-runtime"))
	nameB := strings.TrimSpace(string(rec))
	if err != nil || !strings.HasPrefix(nameB, "airlock-runsc-") {
		t.Errorf("root B records runtime %q (%v), want a name of its own, airlock-runsc-<hash>", nameB, err)
	}
	entryB := entry{Path: filepath.Join(rootB, "tools", "runsc"), Args: runscArgs(rootB)}
	if err == nil {
		if got := d.configured(t)[nameB]; !reflect.DeepEqual(got, entryB) {
			t.Errorf("daemon.json's %q is %+v, want %+v", nameB, got, entryB)
		}
		d.waitRuntime(t, nameB, entryB)
	}
	if r := install(filepath.Join(tmp, "prefix-b"), rootB); r.code != 0 || !strings.Contains(r.stdout, "dockerd runtime "+nameB+": unchanged") {
		t.Errorf("install.sh --root %s again: %s; want its runtime unchanged", rootB, r)
	}

	// C asks for A's name: refused, saying how to choose.
	before, _ := os.ReadFile(d.config)
	r = install(filepath.Join(tmp, "prefix-c"), rootC, "--runtime", "airlock-runsc")
	t.Logf("install.sh --root %s --runtime airlock-runsc: %s", rootC, r)
	if r.code == 0 || !strings.Contains(r.stderr, entryA.Path) || !strings.Contains(r.stderr, "--runtime NAME") {
		t.Errorf("install.sh --runtime airlock-runsc for a third root: %s; want a refusal naming %s and --runtime NAME", r, entryA.Path)
	}
	// Refused before the images' import, not after it.
	if strings.Contains(r.stdout+r.stderr, "images/default.tar") || !strings.Contains(r.stderr, "no image was imported") {
		t.Errorf("install.sh --runtime airlock-runsc for a third root imported images before its refusal: %s", r)
	}
	if after, _ := os.ReadFile(d.config); string(after) != string(before) {
		t.Errorf("a refused registration changed daemon.json:\n%s\nto\n%s", before, after)
	}
	cleanup(t, rootC)

	// Runs on both engines, each root on its own runsc.
	py := []string{"--", "python3", "-c", "print(6 * 7)"}
	for _, c := range []struct{ bin, engine string }{{airlockA, "docker"}, {airlockB, "docker"}, {airlockB, "oci"}} {
		if r := run(append([]string{c.bin, "run", "--engine", c.engine}, py...)...); r.code != 0 || strings.TrimSpace(r.stdout) != "42" {
			t.Errorf("%s run --engine %s: %s", c.bin, c.engine, r)
		}
	}

	// Root B's docker engine runs under its own runtime.
	r = run(airlockB, "sandbox", "create", "--engine", "docker", "--idle-timeout", "5m")
	if r.code != 0 {
		t.Fatalf("sandbox create --engine docker: %s", r)
	}
	for _, id := range d.airlockContainers(t) {
		if rt := d.containerRuntime(t, id); rt != nameB {
			t.Errorf("root B's docker sandbox %.12s runs under runtime %q, want root B's %q", id, rt, nameB)
		}
	}
	if r := run(airlockB, "sandbox", "rm", strings.TrimSpace(r.stdout)); r.code != 0 {
		t.Errorf("sandbox rm: %s", r)
	}

	t.Run("doctor checks this root's runtime", func(t *testing.T) {
		rep := doctorJSON(t, run(airlockB, "doctor", "--engine", "docker", "--json"))
		if !rep.OK {
			t.Errorf("doctor --engine docker on root B: %+v", rep)
		}
		t.Logf("docker runtime: %s", rep.row("docker runtime"))

		// Its runsc gone: every docker run would fail.
		runsc := filepath.Join(rootB, "tools", "runsc")
		if err := os.Rename(runsc, runsc+".away"); err != nil {
			t.Fatal(err)
		}
		r := run(airlockB, "doctor", "--engine", "docker", "--json")
		if err := os.Rename(runsc+".away", runsc); err != nil {
			t.Fatal(err)
		}
		if rep := doctorJSON(t, r); r.code != 69 || !rep.failsNaming(nameB, runsc, "does not exist") {
			t.Errorf("doctor with root B's runsc removed: %s; want a FAIL naming %q, %s and that it does not exist", r, nameB, runsc)
		}

		// airlock-runsc re-pointed at B's runsc, as an installer did before
		// roots had names of their own: A's doctor must see it.
		d.setRuntime(t, "airlock-runsc", entryB)
		r = run(airlockA, "doctor", "--engine", "docker", "--json")
		d.setRuntime(t, "airlock-runsc", entryA)
		if rep := doctorJSON(t, r); r.code != 69 || !rep.failsNaming("airlock-runsc", entryB.Path, entryA.Path) {
			t.Errorf("doctor on root A with airlock-runsc running root B's runsc: %s; want a FAIL naming both", r)
		}
	})

	// B removed: A's docker runs go on.
	cleanup(t, rootB)
	if err := os.RemoveAll(rootB); err != nil {
		t.Fatal(err)
	}
	if r := run(append([]string{airlockA, "run", "--engine", "docker"}, py...)...); r.code != 0 || strings.TrimSpace(r.stdout) != "42" {
		t.Errorf("root A's docker run once root B is gone: %s", r)
	}
	if rep := doctorJSON(t, run(airlockA, "doctor", "--engine", "docker", "--json")); !rep.OK {
		t.Errorf("doctor --engine docker on root A once root B is gone: %+v", rep)
	}
}

// TestBundleRootModes installs a root from the bundle against a private
// dockerd, runs on both engines, and with a live sandbox on each lists the
// mode of everything under the root: nothing may be open to other users
// but what openByDesign names.
func TestBundleRootModes(t *testing.T) {
	d, tmp, run, install := withDockerd(t)
	root := filepath.Join(tmp, "root")
	airlock := filepath.Join(tmp, "prefix", "bin", "airlock")
	defer cleanup(t, root)
	defer func() {
		if ids := d.airlockContainers(t); len(ids) > 0 {
			t.Errorf("containers left on the private dockerd: %v", ids)
		}
	}()
	if r := install(filepath.Join(tmp, "prefix"), root); r.code != 0 {
		t.Fatalf("install.sh --root %s: %s", root, r)
	}
	for _, eng := range []string{"docker", "oci"} {
		if r := run(airlock, "run", "--engine", eng, "--", "python3", "-c", "print(6 * 7)"); r.code != 0 || strings.TrimSpace(r.stdout) != "42" {
			t.Errorf("run --engine %s: %s", eng, r)
		}
	}
	var sandboxes []string
	defer func() {
		for _, id := range sandboxes {
			if r := run(airlock, "sandbox", "rm", id); r.code != 0 {
				t.Errorf("sandbox rm %s: %s", id, r)
			}
		}
	}()
	for _, eng := range []string{"docker", "oci"} {
		r := run(airlock, "sandbox", "create", "--engine", eng, "--idle-timeout", "5m")
		if r.code != 0 {
			t.Fatalf("sandbox create --engine %s: %s", eng, r)
		}
		id := strings.TrimSpace(r.stdout)
		sandboxes = append(sandboxes, id)
		if r := run(airlock, "exec", id, "--", "python3", "-c", "open('f','w').write('x'); print(1)"); r.code != 0 {
			t.Errorf("exec in the %s sandbox: %s", eng, r)
		}
	}
	// The docker sandbox's runsc logs under the root while it lives.
	if logs, _ := filepath.Glob(filepath.Join(root, "sandbox-logs", "*", "*.boot.txt")); len(logs) == 0 {
		t.Errorf("no sandbox log under %s while a docker sandbox lives", filepath.Join(root, "sandbox-logs"))
	}
	listing, open := modes(t, root)
	t.Logf("modes under %s:\n%s", root, listing)
	for _, p := range open {
		t.Errorf("%s is open to other users", p)
	}
}

// openByDesign are paths under a root that others may reach, the widest
// mode each may have, and why. A pattern matches one path (filepath.Match);
// "/..." after it matches what is beneath too.
var openByDesign = []struct {
	pattern string
	perm    fs.FileMode
	why     string
}{
	{".", 0o755, "the root: non-root users of the docker engine read the image index and the tools"},
	{"images", 0o755, "the image index and the default-image lock name images, not secrets; `airlock image ls` and `image default` read them"},
	{"images/index.json", 0o644, "as images"},
	{"images/default.lock", 0o644, "as images"},
	{"tools", 0o755, "airlock's pinned runsc and the exec agent: public binaries"},
	{"tools/runsc", 0o755, "as tools"},
	{"tools/airlock-agent", 0o755, "as tools"},
	{"sandboxes", 0o700, "root's alone: a sandbox's id is no secret, so no other user may enter (runs/ likewise)"},
	{"sandboxes/*", 0o711, "below a directory root's alone: the gofer and the sandbox's uid reach the areas"},
	// The sandbox's own areas, owned by its uid, with whatever modes the
	// program gives its files (SECURITY.md, "A sandbox's /tmp is a host
	// tmpfs").
	{"sandboxes/*/workspace/...", 0o777, "the sandbox's /home/user, its own files"},
	{"sandboxes/*/tmp/...", 0o777, "the sandbox's /tmp"},
	{"sandboxes/*/out/...", 0o777, "the sandbox's /out"},
}

// modes lists the mode of everything under root (not inside image trees),
// and returns the paths another user could reach: every directory above
// it, up to root, lets others through, and its own mode lets them in (a
// directory) or read it (anything else), more widely than openByDesign
// allows.
func modes(t *testing.T, root string) (string, []string) {
	t.Helper()
	var listing strings.Builder
	var open []string
	through := map[string]bool{} // directory: others can reach what is in it
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a run's file, gone meanwhile
			}
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		m := fi.Mode()
		reachable := p == root || through[filepath.Dir(p)]
		var others fs.FileMode // what others may do with it
		switch {
		case m&fs.ModeSymlink != 0:
			// its target is listed where it lives
		case m.IsDir():
			others = m.Perm() & 0o077
			through[p] = reachable && m.Perm()&0o011 != 0
		case m&fs.ModeSocket != 0:
			others = m.Perm() & 0o022
		default:
			others = m.Perm() & 0o044
		}
		fmt.Fprintf(&listing, "%v %s\n", m, rel)
		if reachable && others != 0 && !byDesign(rel, m) {
			open = append(open, rel+" ("+strconv.FormatUint(uint64(m.Perm()), 8)+")")
		}
		// An image's own tree: the image's files, not airlock's.
		if m.IsDir() && (rel == filepath.Join("store", "unpacked") || filepath.Base(p) == "rootfs" && strings.HasPrefix(rel, filepath.Join("oci", "bundles"))) {
			fmt.Fprintf(&listing, "  (the image's files below %s are not listed)\n", rel)
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return listing.String(), open
}

// byDesign reports whether openByDesign lets rel have mode m.
func byDesign(rel string, m fs.FileMode) bool {
	for _, o := range openByDesign {
		match, _ := filepath.Match(o.pattern, rel)
		if base, ok := strings.CutSuffix(o.pattern, "/..."); ok && !match {
			parts := strings.Split(rel, "/")
			for i := range parts {
				if mm, _ := filepath.Match(base, strings.Join(parts[:i+1], "/")); mm && i+1 < len(parts) {
					match = true
				}
			}
			if mm, _ := filepath.Match(base, rel); mm {
				match = true
			}
		}
		if match && m.Perm()&0o077&^(o.perm&0o077) == 0 {
			return true
		}
	}
	return false
}
