//go:build e2e

package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/tools/kube/cluster"
)

// TestUpDown runs `kube up` twice and `kube down` as `make kube-up` and
// `make kube-down` do, under airlock's root ($AIRLOCK_ROOT), and checks what
// the control plane promises: a 0600 kubeconfig, every socket on 127.0.0.1,
// every open file under <root>/kube, agent-sandbox's types validated by the
// server, and nothing left after down but the cached binaries.
func TestUpDown(t *testing.T) {
	ctx := context.Background()
	l := cluster.NewLayout("")
	if err := cluster.Ready(ctx, l); err == nil {
		t.Fatalf("a control plane is up already under %s; run make kube-down first", l.Dir)
	}
	before := snapshot(t, l)

	out := kube(t, "up")
	want := "export KUBECONFIG=" + l.Kubeconfig() + " PATH=" + l.KubectlDir() + ":$PATH"
	if last := lastLine(out); last != want {
		t.Fatalf("kube up's last line = %q, want %q", last, want)
	}
	downed := false
	t.Cleanup(func() {
		if !downed {
			kube(t, "down")
		}
	})
	if out := kube(t, "up"); !strings.Contains(out, "already up") || lastLine(out) != want {
		t.Errorf("a second kube up did not say it is already up:\n%s", out)
	}

	fi, err := os.Stat(l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig is %v, want 0600", fi.Mode().Perm())
	}

	pids, err := cluster.Pids(l)
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) != len(cluster.Components) {
		t.Fatalf("pids recorded: %v, want one for each of %v", pids, cluster.Components)
	}
	ports, err := cluster.ReadPorts(l)
	if err != nil {
		t.Fatal(err)
	}
	listening := map[int]bool{}
	for name, pid := range pids {
		inodes, files := fds(t, pid)
		for _, f := range files {
			if !strings.HasPrefix(f, l.Dir+"/") {
				t.Errorf("%s (pid %d) holds %s open for writing, outside %s", name, pid, f, l.Dir)
			}
		}
		for _, s := range sockets(t) {
			if !inodes[s.inode] {
				continue
			}
			if !s.addr.IsLoopback() {
				t.Errorf("%s (pid %d) has a %s socket on %s:%d", name, pid, s.proto, s.addr, s.port)
			}
			if s.listen {
				listening[s.port] = true
			}
		}
	}
	for name, port := range ports {
		if !listening[port] {
			t.Errorf("nothing listens on %s's port %d", name, port)
		}
	}
	if len(listening) != len(ports) {
		t.Errorf("listening on %v, recorded %v", listening, ports)
	}

	sameRelease(t, l)
	kubectl(t, l, true, "testdata/valid.yaml")
	if out := kubectl(t, l, false, "testdata/bad-enum.yaml"); !strings.Contains(out, "Unsupported value") {
		t.Errorf("the bad enum was refused, but not for its value:\n%s", out)
	}
	rendered(t, l)

	kube(t, "down")
	downed = true
	for name, pid := range pids {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !exited(b) {
			t.Errorf("%s (pid %d) still runs after down", name, pid)
		}
	}
	for _, s := range sockets(t) {
		for name, port := range ports {
			if s.listen && s.port == port {
				t.Errorf("%s's port %d is still listening after down", name, port)
			}
		}
	}
	entries, err := os.ReadDir(l.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "bin" {
			t.Errorf("%s is left after down", filepath.Join(l.Dir, e.Name()))
		}
	}
	after := snapshot(t, l)
	for _, k := range sysctls {
		if after.sysctls[k] != before.sysctls[k] {
			t.Errorf("sysctl %s changed from %s to %s", k, before.sysctls[k], after.sysctls[k])
		}
	}
	for m := range after.mounts {
		if !before.mounts[m] {
			t.Errorf("a new mount: %s", m)
		}
	}
	for name := range after.outside {
		if !before.outside[name] {
			t.Errorf("%s was created outside %s", name, l.Dir)
		}
	}
}

// kube runs `go run ./cmd/kube CMD` from this module, as the Makefile does.
func kube(t *testing.T, cmd string) string {
	t.Helper()
	goBin := os.Getenv("GO")
	if goBin == "" {
		goBin = "go"
	}
	c := exec.Command(goBin, "run", "./cmd/kube", cmd)
	c.Dir = ".."
	// Its output goes on as it comes: a cold build is silent for minutes
	// otherwise.
	var out bytes.Buffer
	c.Stdout = io.MultiWriter(&out, os.Stdout)
	c.Stderr = c.Stdout
	start := time.Now()
	err := c.Run()
	t.Logf("kube %s took %s", cmd, time.Since(start).Round(100*time.Millisecond))
	if err != nil {
		t.Fatalf("kube %s: %v", cmd, err)
	}
	return out.String()
}

// rendered checks that the API server takes what `airlock kube render`
// prints, with and without a warm pool, when $AIRLOCK_BIN names airlock
// (make test-kube-up builds it).
func rendered(t *testing.T, l cluster.Layout) {
	bin := os.Getenv("AIRLOCK_BIN")
	if bin == "" {
		t.Log("AIRLOCK_BIN unset: airlock kube render is not checked")
		return
	}
	airlock := func(args ...string) []byte {
		t.Helper()
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			t.Fatalf("airlock %v: %v", args, err)
		}
		return out
	}
	name := fmt.Sprintf("kube-render-%d", os.Getpid())
	airlock("template", "create", name, "--memory", "256MiB", "--cpus", "0.5")
	defer airlock("template", "rm", name)
	for _, args := range [][]string{{}, {"--warm", "2", "--namespace", "default", "--ttl", "10m"}} {
		f := filepath.Join(t.TempDir(), "render.yaml")
		if err := os.WriteFile(f, airlock(append([]string{"kube", "render", "--template", name}, args...)...), 0o600); err != nil {
			t.Fatal(err)
		}
		kubectl(t, l, true, f)
		t.Logf("the API server takes airlock kube render %v", args)
	}
}

// sameRelease checks that the kubectl kube up points at is the API
// server's release, not whatever kubectl the host has.
func sameRelease(t *testing.T, l cluster.Layout) {
	t.Helper()
	home := t.TempDir()
	c := exec.Command(l.Kubectl(), "--kubeconfig="+l.Kubeconfig(), "--cache-dir="+filepath.Join(home, "cache"), "version", "-o", "json")
	c.Env = append(os.Environ(), "HOME="+home)
	out, err := c.Output()
	if err != nil {
		t.Fatalf("%s version: %v", l.Kubectl(), err)
	}
	var v struct {
		Client struct{ GitVersion string } `json:"clientVersion"`
		Server struct{ GitVersion string } `json:"serverVersion"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("kubectl version: %v\n%s", err, out)
	}
	if v.Client.GitVersion == "" || v.Client.GitVersion != v.Server.GitVersion {
		t.Errorf("kubectl %q against API server %q: want one release", v.Client.GitVersion, v.Server.GitVersion)
	}
}

// kubectl applies file with a server-side dry run and checks it is accepted
// (or refused).
func kubectl(t *testing.T, l cluster.Layout, accept bool, file string) string {
	t.Helper()
	home, err := os.MkdirTemp("", "kubectl-home-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(home)
	c := exec.Command(l.Kubectl(), "--kubeconfig="+l.Kubeconfig(), "--cache-dir="+filepath.Join(home, "cache"),
		"apply", "--dry-run=server", "-f", file)
	c.Env = append(os.Environ(), "HOME="+home)
	out, err := c.CombinedOutput()
	if accept && err != nil {
		t.Errorf("%s refused: %v\n%s", file, err, out)
	}
	if !accept && err == nil {
		t.Errorf("%s accepted:\n%s", file, out)
	}
	return string(out)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

func exited(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X')
}

// fds returns the socket inodes and the paths of the files pid holds open
// for writing; pipes, anonymous inodes and devices are neither. (Go's
// runtime keeps cgroup files open to read the CPU quota.)
func fds(t *testing.T, pid int) (map[uint64]bool, []string) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[uint64]bool{}
	var files []string
	for _, e := range entries {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		switch {
		case strings.HasPrefix(link, "socket:["):
			n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q", dir, link)
			}
			inodes[n] = true
		case strings.HasPrefix(link, "pipe:"), strings.HasPrefix(link, "anon_inode:"), strings.HasPrefix(link, "/dev/"):
		default:
			info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
			if err != nil {
				continue // closed meanwhile
			}
			if writable(info) {
				files = append(files, link)
			}
		}
	}
	return inodes, files
}

// writable reads the flags line of /proc/<pid>/fdinfo/<fd> (octal): the
// access mode is O_WRONLY or O_RDWR.
func writable(fdinfo []byte) bool {
	for _, line := range strings.Split(string(fdinfo), "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			return err != nil || flags&3 != 0
		}
	}
	return true
}

type socket struct {
	proto  string
	addr   net.IP
	port   int
	listen bool
	inode  uint64
}

// sockets reads every TCP and UDP socket of this network namespace from
// /proc/net.
func sockets(t *testing.T) []socket {
	t.Helper()
	var all []socket
	for _, proto := range []string{"tcp", "tcp6", "udp", "udp6"} {
		f, err := os.Open("/proc/net/" + proto)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 {
				continue
			}
			hexAddr, hexPort, _ := strings.Cut(fields[1], ":")
			port, err1 := strconv.ParseUint(hexPort, 16, 16)
			inode, err2 := strconv.ParseUint(fields[9], 10, 64)
			addr, err3 := procAddr(hexAddr)
			if err1 != nil || err2 != nil || err3 != nil {
				t.Fatalf("/proc/net/%s: %q", proto, sc.Text())
			}
			// 0A is TCP_LISTEN; a bound UDP socket counts as listening.
			listen := fields[3] == "0A" || (strings.HasPrefix(proto, "udp") && fields[3] == "07")
			all = append(all, socket{proto: proto, addr: addr, port: int(port), listen: listen, inode: inode})
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return all
}

// procAddr decodes an address of /proc/net/tcp{,6}: 32-bit words in host
// (little-endian) byte order.
func procAddr(s string) (net.IP, error) {
	b, err := hex.DecodeString(s)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return nil, fmt.Errorf("bad address %q", s)
	}
	for i := 0; i < len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	return net.IP(b), nil
}

// state is what the control plane must not change outside <root>/kube.
type state struct {
	mounts  map[string]bool
	outside map[string]bool
	sysctls map[string]string
}

// sysctls are the host settings a kubelet changes (and a pod network
// would): none of them may move.
var sysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward"}

// snapshot reads a few sysctls, the mount table and every path on this machine's usual
// writable places whose name looks like the control plane's (kube, etcd,
// apiserver, agent-sandbox): /etc, /usr, /opt, /run, /var, /root, /home,
// /srv, /tmp and this module, skipping <root> below its top level, the
// module and build caches, and docker's and containerd's state.
func snapshot(t *testing.T, l cluster.Layout) state {
	t.Helper()
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	s := state{mounts: map[string]bool{}, outside: map[string]bool{}, sysctls: map[string]string{}}
	for _, k := range sysctls {
		v, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			t.Fatal(err)
		}
		s.sysctls[k] = strings.TrimSpace(string(v))
	}
	root := filepath.Dir(l.Dir)
	// Other tests on this machine mount and unmount meanwhile: only mounts
	// under <root>/kube or that look like the control plane's count.
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, l.Dir) || looksOurs(line) {
			s.mounts[line] = true
		}
	}
	home, _ := os.UserHomeDir()
	skip := map[string]bool{l.Dir: true, "/var/lib/docker": true, "/var/lib/containerd": true, "/proc": true, "/sys": true}
	for _, d := range []string{"go", ".cache", ".npm", ".config/go"} {
		skip[filepath.Join(home, d)] = true
	}
	module, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, top := range []string{"/etc", "/usr", "/opt", "/run", "/var", "/root", "/home", "/srv", os.TempDir(), module} {
		filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return nil // gone meanwhile, or unreadable: not ours
			}
			if d.IsDir() && skip[p] {
				return filepath.SkipDir
			}
			if looksOurs(d.Name()) {
				s.outside[p] = true
			}
			if d.IsDir() && filepath.Dir(p) == root {
				return filepath.SkipDir // airlock's own state: only its top level
			}
			return nil
		})
	}
	return s
}

func looksOurs(name string) bool {
	name = strings.ToLower(name)
	for _, w := range []string{"kube", "etcd", "apiserver", "agent-sandbox"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}
