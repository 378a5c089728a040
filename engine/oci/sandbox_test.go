package oci

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/isolation"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/pkitest"
	"github.com/airlock-sandbox/airlock/internal/proc/proctest"
)

func TestCheckSandboxID(t *testing.T) {
	for _, c := range []struct {
		id string
		ok bool
	}{
		{"abc", true}, {"a-b_c.9", true}, {"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", true},
		{"", false}, {"../etc", false}, {"a/b", false}, {".hidden", false}, {"-flag", false}, {"a b", false},
		{"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0", false},
	} {
		if err := checkSandboxID(c.id); (err == nil) != c.ok || err != nil && !errdefs.IsInvalidArgument(err) {
			t.Errorf("checkSandboxID(%q) = %v; want ok %v", c.id, err, c.ok)
		}
	}
}

// An exec is derived from the init's process: only argv, env and workdir
// change, so nothing widens.
func TestExecProcessNarrowsNothing(t *testing.T) {
	ini := specs.Process{
		User:            specs.User{UID: 65534, GID: 65534},
		Args:            []string{initPath},
		Env:             []string{"PATH=/bin", "A=1"},
		Cwd:             "/",
		Capabilities:    &specs.LinuxCapabilities{},
		NoNewPrivileges: true,
		Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 64, Soft: 64}},
	}
	s := &sandbox{process: ini}
	pr, err := s.execProcess(&engine.Process{Argv: []string{"sh", "-c", "x"}, Env: []string{"A=2", "B=3"}, Workdir: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pr.User, ini.User) || !pr.NoNewPrivileges || pr.Capabilities != ini.Capabilities || !slices.Equal(pr.Rlimits, ini.Rlimits) || pr.Terminal {
		t.Fatalf("exec process widened: %+v", pr)
	}
	if !slices.Equal(pr.Args, []string{"sh", "-c", "x"}) || !slices.Equal(pr.Env, []string{"PATH=/bin", "A=2", "B=3"}) || pr.Cwd != "/tmp" {
		t.Fatalf("exec process: args %q env %q cwd %q", pr.Args, pr.Env, pr.Cwd)
	}
	if !slices.Equal(s.process.Env, []string{"PATH=/bin", "A=1"}) {
		t.Fatalf("the exec changed the sandbox's env: %q", s.process.Env)
	}
	for _, p := range []engine.Process{
		{}, {Argv: []string{""}}, {Argv: []string{"a\x00b"}}, {Argv: []string{"true"}, Env: []string{"NOEQUALS"}},
		{Argv: []string{"true"}, Env: []string{"=v"}}, {Argv: []string{"true"}, Workdir: "tmp"}, {Argv: []string{"true"}, Workdir: "/a/../b"},
	} {
		if _, err := s.execProcess(&p); !errdefs.IsInvalidArgument(err) {
			t.Errorf("execProcess(%+v) = %v; want invalid argument", p, err)
		}
	}
}

func TestProcStart(t *testing.T) {
	a, ok := procStart(os.Getpid())
	b, ok2 := procStart(os.Getpid())
	if !ok || !ok2 || a == 0 || a != b {
		t.Fatalf("procStart(self) = %d %v, %d %v", a, ok, b, ok2)
	}
	if _, ok := procStart(1 << 30); ok {
		t.Fatal("procStart of a pid that cannot exist succeeded")
	}
	// A zombie has exited, but its pid is taken and its parent link holds.
	_, z := proctest.Zombie(t)
	if _, ok := procStart(z.Pid); ok {
		t.Error("procStart of a zombie succeeded")
	}
	if got := hostProcs(map[int]bool{z.Pid: true}); len(got) != 1 || got[0].Ppid != os.Getpid() {
		t.Errorf("hostProcs of a zombie: %+v; want it, child of %d", got, os.Getpid())
	}
}

// Resolve keeps explicit engine names; auto picks oci only where it is
// usable, and a root without setup's runsc is not.
func TestResolveKeepsExplicitNames(t *testing.T) {
	for _, n := range []string{"oci", "docker"} {
		if got := Resolve(t.TempDir(), n); got != n {
			t.Errorf("Resolve(%q) = %q", n, got)
		}
	}
	if got := Resolve(t.TempDir(), "auto"); got != "docker" {
		t.Errorf("auto with no runsc = %q, want docker", got)
	}
}

// A long-lived sandbox's egress is kept in its state file for its
// supervisor as entries and credential sources, never a value, and reads
// back as the policy it was; a policy without egress keeps none, and its
// spec gets no network of airlock's.
func TestEgressState(t *testing.T) {
	e, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	allow, err := egress.ParseAllowlist([]string{"pypi.org", "127.0.0.1:8080"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := egress.ParseCredential("api.example.com=Authorization:API_KEY")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("API_KEY", "sk-never-in-the-state-0123456789")
	eg := isolation.Egress{Allow: allow, Credentials: []egress.Credential{c}}
	b, err := json.Marshal(sandboxState{ID: "sb-1", Egress: egressStateOf(eg)})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "sk-never") {
		t.Errorf("the state holds a credential's value: %s", b)
	}
	var st sandboxState
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	back, err := st.Egress.policy()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.Allow.Entries(), allow.Entries()) || !slices.Equal(back.Credentials, eg.Credentials) {
		t.Errorf("read back %+v, want %+v", back, eg)
	}
	if n := e.ociNetwork("sb-1", eg); n == nil || n.Proxy != "http://169.254.0.1:3128" || filepath.Dir(n.NetNS) != e.netnsDir() {
		t.Errorf("ociNetwork: %+v", n)
	}
	if egressStateOf(isolation.Egress{}) != nil || e.ociNetwork("sb-1", isolation.Egress{}) != nil {
		t.Error("a policy without egress has a network")
	}
}

// A proxy reads the engine's egress hosts file and CA bundle when it is
// made; one that cannot be read or parsed fails it, as invalid input,
// never a proxy without it.
func TestEgressFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hosts, badHosts := write("hosts", "127.0.0.1 mirror.lab\n"), write("bad-hosts", "mirror.lab\n")
	ca, badCA := write("ca.pem", string(pkitest.New(t, "mirror.lab").CAPEM)), write("bad-ca.pem", "no certificate\n")
	allow, err := egress.ParseAllowlist([]string{"mirror.lab"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		hosts, ca string
		ok        bool
	}{
		{"none", "", "", true},
		{"both", hosts, ca, true},
		{"bad hosts", badHosts, ca, false},
		{"missing hosts", filepath.Join(dir, "missing"), "", false},
		{"bad CA", hosts, badCA, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(t.TempDir(), WithEgressHosts(tc.hosts), WithEgressCA(tc.ca))
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.newProxy("sb-1", isolation.Egress{Allow: allow})
			if tc.ok != (err == nil) || err != nil && !errdefs.IsInvalidArgument(err) {
				t.Errorf("newProxy: %v; want ok %v, else invalid input", err, tc.ok)
			}
		})
	}
}

// The reaper finds a sandbox's egress network namespaces by their files
// and removes them.
func TestReapNetns(t *testing.T) {
	e, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const id = "0011223344556677889b"
	dir := e.netnsDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{id + ".sandbox", id + ".proxy"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := e.Leftovers(context.Background())
	if err != nil || !slices.Contains(ids, id) {
		t.Fatalf("Leftovers: %v, %v; want %s among them", ids, err, id)
	}
	if err := e.Reap(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left after Reap: %v", left)
	}
}

// TestPlatformFlags: systrap's fast path is off on a host of two CPUs or
// fewer, on every runsc command line, after the policy's flags and never
// in place of them.
func TestPlatformFlags(t *testing.T) {
	for cpus, want := range map[int]bool{1: true, 2: true, 3: false, 64: false} {
		if got := slices.Contains(platformFlags(cpus), "--systrap-disable-fast-path"); got != want {
			t.Errorf("%d CPUs: fast path off %v, want %v", cpus, got, want)
		}
	}
	e := &Engine{runsc: "/runsc"}
	_, _, args := e.runtimeFor(isolation.GVisor, "/bundle")
	policy := isolation.RunscFlags()
	if !slices.Equal(args[2:2+len(policy)], policy) {
		t.Errorf("runsc args %q do not start with the policy's flags %q after --root", args, policy)
	}
	for _, f := range platformFlags(runtime.NumCPU()) {
		if !slices.Contains(args, f) || !slices.Contains(runscFlags("/logs"), f) {
			t.Errorf("runsc args %q, run flags %q: %s missing", args, runscFlags("/logs"), f)
		}
	}
}

// TestKillInCgroup: killInCgroup kills a process of the sandbox's cgroup
// (as root: the test makes one, as a create does), and leaves alone a
// process outside it, in a cgroup whose name only begins with the
// sandbox's id included.
func TestKillInCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a cgroup needs root; `make test` runs this as root")
	}
	id := fmt.Sprintf("sb-test%015d", os.Getpid())
	start := func(id string) *exec.Cmd {
		t.Helper()
		g, err := cgroup.New(id, cgroup.Limits{Memory: 64 << 20, MilliCPUs: 1000, Pids: 16})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Delete(context.Background()) })
		c := exec.Command("sleep", "60")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		if err := g.Add(c.Process.Pid); err != nil {
			t.Fatal(err)
		}
		return c
	}
	mine := start(id)
	other := start(id + "x")
	if !inCgroup(mine.Process.Pid, id) || inCgroup(other.Process.Pid, id) || inCgroup(os.Getpid(), id) {
		t.Fatalf("inCgroup: the sandbox's %v, a longer name's %v, the test's %v", inCgroup(mine.Process.Pid, id), inCgroup(other.Process.Pid, id), inCgroup(os.Getpid(), id))
	}
	killInCgroup(other.Process.Pid, id)
	killInCgroup(mine.Process.Pid, id)
	if err := mine.Wait(); err == nil {
		t.Error("the sandbox's process was not killed")
	}
	if err := other.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("a process outside the sandbox's cgroup was hit: %v", err)
	}
}

// The runc child's limits, raised above airlock's, saturate rather than
// wrap past the largest limit.
func TestRaiseSaturates(t *testing.T) {
	for _, c := range []struct{ v, d, want int64 }{
		{512 << 20, 1 << 20, 513 << 20}, {math.MaxInt64 - 5, 1 << 20, math.MaxInt64}, {math.MaxInt64, 1, math.MaxInt64}, {64, 1, 65},
	} {
		v := c.v
		if raise(&v, c.d); v != c.want {
			t.Errorf("raise(%d, %d) = %d, want %d", c.v, c.d, v, c.want)
		}
	}
}
