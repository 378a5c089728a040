//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/internal/proc"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/store"
)

// What stops an attempt, as SECURITY.md names the layers.
const (
	layerGVisor  = "gVisor"
	layerConfig  = "sandbox configuration"
	layerSeccomp = "seccomp profile"
	layerAirlock = "airlock"
)

// advCase is one attempt and the exact outcome expected in the pair under
// test.
type advCase struct {
	group, name string
	outcome     string // what the program sees, for the matrix
	layer       string // what stops it
	check       func() error
}

// advRun is one `airlock run --json`. Runs go from several goroutines, so
// a bad result is kept here rather than failing the test on the spot.
type advRun struct {
	res runner.Result
	cli cliResult
	err error
}

func advRunJSON(env []string, args ...string) advRun {
	return advJSON(env, append([]string{"run", "--json"}, args...)...)
}

// advJSON runs an airlock command that prints one Result object (`run
// --json`, `exec --json`).
func advJSON(env []string, args ...string) advRun {
	c := airlock(env, args...)
	r := advRun{cli: c}
	dec := json.NewDecoder(strings.NewReader(c.stdout))
	if err := dec.Decode(&r.res); err != nil {
		r.err = fmt.Errorf("stdout is not one JSON object (%v): %q; stderr %s", err, c.stdout, c.stderr)
	} else if dec.More() {
		r.err = fmt.Errorf("stdout holds more than one JSON value: %q", c.stdout)
	}
	return r
}

// ended checks how a run ended.
func (r advRun) ended(reason runner.Reason, exit int) error {
	if r.err != nil {
		return r.err
	}
	if r.res.Reason != reason || (reason == runner.ReasonExited && r.res.ExitCode != exit) {
		return fmt.Errorf("reason %s exit %d, want %s exit %d; stdout %q stderr %q", r.res.Reason, r.res.ExitCode, reason, exit,
			clip(r.res.Stdout.Head), clip(r.res.Stderr.Head))
	}
	return nil
}

// sandboxLost checks that an exec found its sandbox lost.
func sandboxLost(r advRun) error {
	if r.err != nil {
		return r.err
	}
	if r.res.Reason != runner.ReasonError || r.res.ErrorKind != "sandbox_lost" || r.cli.code != 69 {
		return fmt.Errorf("reason %s (%s: %s), airlock exit %d; want sandbox_lost, exit 69", r.res.Reason, r.res.ErrorKind, r.res.Error, r.cli.code)
	}
	return nil
}

func clip(b []byte) []byte {
	if len(b) > 600 {
		return append(b[:300:300], append([]byte("…"), b[len(b)-300:]...)...)
	}
	return b
}

// advHost is what the host holds for the sandbox to aim at, and what must
// be the same afterwards.
type advHost struct {
	tcp, abstract, unixSock        net.Listener
	abstractName, sockPath         string
	acceptTCP, acceptAbs, acceptUn atomic.Int64

	file      string // a host file the sandbox tries to overwrite
	fileData  []byte
	hostname  string
	cmdline   string
	resolvers []string
	machineID string
	initStart string // start time of the host's pid 1
	secret    string // in airlock's own environment, never the sandbox's

	imageEnv     []string // the default image's config
	imageWorkdir string
	imageRootfs  string
}

func newAdvHost(t *testing.T) *advHost {
	t.Helper()
	h := &advHost{}
	var err error
	if h.tcp, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	h.abstractName = "airlock-e2e-" + rand.Text()
	if h.abstract, err = net.Listen("unix", "@"+h.abstractName); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	h.sockPath = filepath.Join(dir, "host.sock")
	if h.unixSock, err = net.Listen("unix", h.sockPath); err != nil {
		t.Fatal(err)
	}
	for ln, n := range map[net.Listener]*atomic.Int64{h.tcp: &h.acceptTCP, h.abstract: &h.acceptAbs, h.unixSock: &h.acceptUn} {
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				n.Add(1)
				c.Close()
			}
		}()
	}
	h.file = filepath.Join(dir, "host-secret.txt")
	h.fileData = []byte("host only " + rand.Text() + "\n")
	if err := os.WriteFile(h.file, h.fileData, 0o666); err != nil {
		t.Fatal(err)
	}
	h.secret = "hunter2-" + rand.Text()
	h.hostname, _ = os.Hostname()
	cmdline, _ := os.ReadFile("/proc/cmdline")
	h.cmdline = strings.TrimSpace(string(cmdline))
	resolv, _ := os.ReadFile("/etc/resolv.conf")
	for _, line := range strings.Split(string(resolv), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "nameserver" {
			h.resolvers = append(h.resolvers, f[1])
		}
	}
	mid, _ := os.ReadFile("/etc/machine-id")
	h.machineID = strings.TrimSpace(string(mid))
	h.initStart = procStartTime(1)
	if h.hostname == "" || h.cmdline == "" || h.initStart == "" {
		t.Fatalf("host facts missing: hostname %q cmdline %q pid 1 start %q", h.hostname, h.cmdline, h.initStart)
	}

	ref, err := images.ParseRef(defaultRef)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(rootDir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := st.Image(ref.ID)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	h.imageEnv, h.imageWorkdir = cf.Config.Env, cf.Config.WorkingDir
	if h.imageRootfs, err = st.Rootfs(context.Background(), ref.ID); err != nil {
		t.Fatal(err)
	}
	return h
}

// procStartTime is a process's start time; "" when it is gone.
func procStartTime(pid int) string {
	st, err := proc.ReadStat(pid)
	if err != nil {
		return ""
	}
	return strconv.FormatUint(st.StartTime, 10)
}

func (h *advHost) port() int { return h.tcp.Addr().(*net.TCPAddr).Port }

func (h *advHost) noneAccepted(n *atomic.Int64, what string) func() error {
	return func() error {
		if got := n.Load(); got != 0 {
			return fmt.Errorf("the host's %s accepted %d connection(s) from the sandbox", what, got)
		}
		return nil
	}
}

func (h *advHost) fileUnchanged() error {
	b, err := os.ReadFile(h.file)
	if err != nil || !bytes.Equal(b, h.fileData) {
		return fmt.Errorf("host file %s changed: %q, %v", h.file, b, err)
	}
	return nil
}

func (h *advHost) hostnameUnchanged() error {
	if now, _ := os.Hostname(); now != h.hostname {
		return fmt.Errorf("the host's name changed from %q to %q", h.hostname, now)
	}
	return nil
}

func (h *advHost) imageUnchanged() error {
	if _, err := os.Lstat(filepath.Join(h.imageRootfs, "airlock-probe")); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("the shared image rootfs holds the sandbox's file: %v", err)
	}
	return nil
}

func (h *advHost) initUnchanged() error {
	if now := procStartTime(1); now != h.initStart {
		return fmt.Errorf("the host's pid 1 changed: start time %q, was %q", now, h.initStart)
	}
	return nil
}

// advPeer is a second sandbox listening on its own loopback while the
// probe runs.
type advPeer struct {
	cmd    *exec.Cmd
	stdout io.ReadCloser
	stderr bytes.Buffer
	ready  string      // its first line
	line   chan string // delivers the first line when it comes late
	rest   []byte      // what it printed after
	code   int
	id     string
	err    error
}

const peerPort = 8080

const peerScript = `
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(8)
print("listening", flush=True)
while True:
    c, a = s.accept()
    print("accepted", a, flush=True)
    c.close()
`

// startPeer streams (no --json) so that the host sees "listening" as it
// is printed; --debug logs carry its sandbox_id.
func startPeer() *advPeer {
	p := &advPeer{}
	p.cmd = exec.Command(airlockBin, "--root", rootDir, "--debug", "run", "--engine", engineName, "--isolation", isolationName,
		"--timeout", "120s", "--", "python3", "-c", peerScript, strconv.Itoa(peerPort))
	p.cmd.Stderr = &p.stderr
	if p.stdout, p.err = p.cmd.StdoutPipe(); p.err != nil {
		return p
	}
	if p.err = p.cmd.Start(); p.err != nil {
		return p
	}
	br := bufio.NewReader(p.stdout)
	p.stdout = io.NopCloser(br)
	p.line = make(chan string, 1)
	go func() {
		s, _ := br.ReadString('\n')
		p.line <- s
	}()
	select {
	case p.ready = <-p.line:
		p.line = nil
	case <-time.After(60 * time.Second):
	}
	if p.ready != "listening\n" {
		p.err = fmt.Errorf("the peer sandbox did not start listening: %q", p.ready)
	}
	return p
}

var sandboxIDLog = regexp.MustCompile(`sandbox_id=([0-9a-f]{20})`)

// stop interrupts airlock, which kills and removes the peer.
func (p *advPeer) stop() {
	if p.cmd.Process == nil {
		return
	}
	p.cmd.Process.Signal(os.Interrupt)
	if p.line != nil {
		<-p.line // the reader is done with stdout
	}
	p.rest, _ = io.ReadAll(p.stdout)
	err := p.cmd.Wait()
	p.code = p.cmd.ProcessState.ExitCode()
	if m := sandboxIDLog.FindStringSubmatch(p.stderr.String()); m != nil {
		p.id = m[1]
	} else if p.err == nil {
		p.err = fmt.Errorf("no sandbox_id in the peer's log (%v): %s", err, p.stderr.String())
	}
}

// leftOf lists what is left of these runs. The machine may run other
// airlock tests at the same time, so only these IDs count.
func leftOf(ids ...string) []string {
	var left []string
	for _, s := range sandboxes() {
		for _, id := range ids {
			if id != "" && strings.Contains(s, id) {
				left = append(left, s)
			}
		}
	}
	return left
}

// advRuns holds every run the cases look at.
type advRuns struct {
	probe    advRun
	lines    map[string][2]string // probe line name → result, detail
	peer     *advPeer
	after    advRun // the next run after the probe
	forkBomb advRun
	hostTrue error // the host running /bin/true during the fork bomb
	threads  advRun
	memory   advRun
	fill     advRun
	cpuSpin  advRun
	sleeper  advRun
	noTerm   advRun
	zombies  advRun
	flood    advRun
	hugeLine advRun
	errFlood advRun
	binary   advRun
	fake     advRun

	// live is set when the probe and after ran as execs in one long-lived
	// sandbox (TestAdversarialExec) rather than as runs; other then lists
	// another live sandbox's areas after the probe, and next is the exec
	// that follows after in the probe's sandbox.
	live        bool
	other, next advRun
	// restored is set when each run was an exec in a sandbox of its own,
	// restored from a snapshot whose warm program (advWarm) runs on in it
	// (TestAdversarialRestored): a live sandbox's working directory, HOME
	// and pid 1, and a host name of its own, but no state shared by runs.
	restored bool
}

// listScript prints what is in /tmp and /out.
const listScript = `echo "tmp:$(ls -A /tmp | tr '\n' ' ')"
echo "out:$(ls -A /out | tr '\n' ' ')"
`

// afterScript lists /tmp and /out, then kills pid 1 from a child shell.
// The pause between lets the listing reach the host first: killing pid 1
// may end the sandbox, and with it what an exec agent had not yet relayed
// (a restored run once lost its "out:" line so).
const afterScript = listScript + "sleep 1\n" + killScript + "echo alive"

// killScript sends pid 1 SIGKILL from a child shell.
const killScript = `sh -c 'kill -9 1; echo "kill:$?"'
`

// liveAfterScript is afterScript for an exec into a live sandbox. Under
// gVisor the sentry's SIGKILL to the rest of the sandbox, once its init
// has died, comes a moment later: the killer's shell waits for it rather
// than race it.
func liveAfterScript() string {
	if isolationName == "gvisor" {
		return listScript + "sleep 1\n" + killScript + "sleep 5\necho alive"
	}
	return afterScript
}

const threadBomb = `
import threading, time
while True:
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
`

const fillScript = `
import os
def fill(d):
    n, i, chunk = 0, 0, b"\xa5" * (1 << 20)
    try:
        while True:
            # 16MiB per file, below RLIMIT_FSIZE: the filesystem fills first.
            fd = os.open("%s/fill%d" % (d, i), os.O_CREAT | os.O_WRONLY, 0o600)
            i += 1
            try:
                for _ in range(16):
                    n += os.write(fd, chunk)
            finally:
                os.close(fd)
    except OSError as e:
        return "errno=%d bytes=%d" % (e.errno, n)
print("tmp", fill("/tmp"))
print("out", fill("/out"))
for f in os.listdir("/out"):
    os.remove("/out/" + f)
n = 0
try:
    while True:
        os.close(os.open("/out/f%d.txt" % n, os.O_CREAT | os.O_WRONLY, 0o600))
        n += 1
except OSError as e:
    print("out_files errno=%d files=%d" % (e.errno, n))
for f in os.listdir("/out"):
    os.remove("/out/" + f)
`

const zombieScript = `
import os, time
for _ in range(200):
    if os.fork() == 0:
        os._exit(0)
time.sleep(1)
z = 0
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            z += open("/proc/%s/stat" % p).read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            pass
print("zombies", z)
`

// escapes is what a program prints to take over a terminal: clear the
// screen, retitle the window, move the cursor up and overwrite a line.
const escapes = "\x1b[2J\x1b[H\x1b]0;owned\x07\x1b[31mred\x1b[0m\r\x1b[1A\x1b[Kdone\n"

const binaryScript = `
import sys
sys.stdout.buffer.write(bytes(range(256)) * 4)
sys.stderr.write(sys.argv[1])
`

// fakeResult is what airlock prints, claiming success.
const fakeResult = `{"id":"fake","reason":"exited","exit_code":0,"stdout":{"text":"all tests passed\n","bytes":17,"truncated":false}}`

// runAll makes every run of the suite with run, which takes `airlock run
// --json`'s arguments: advRunJSON, or a warm pool's (TestAdversarialPooled).
func (h *advHost) runAll(t *testing.T, run func(env []string, args ...string) advRun) *advRuns {
	t.Helper()
	script, err := os.ReadFile("testdata/adversarial/probe.py")
	if err != nil {
		t.Fatal(err)
	}
	r := &advRuns{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var took []string
	slots := make(chan struct{}, 3)
	do := func(name string, f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			start := time.Now()
			f()
			mu.Lock()
			took = append(took, fmt.Sprintf("%s %.1fs", name, time.Since(start).Seconds()))
			mu.Unlock()
		}()
	}
	do("probe", func() {
		r.peer = startPeer()
		r.probe = run([]string{"AIRLOCK_E2E_SECRET=" + h.secret}, "--env", "GIVEN=yes", "--timeout", "60s", "--",
			"python3", "-c", string(script), strconv.Itoa(h.port()), h.abstractName, h.sockPath, strconv.Itoa(os.Getpid()), h.file,
			strconv.Itoa(peerPort))
		r.peer.stop()
		r.after = run(nil, "--image", busybox, "--", "sh", "-c", afterScript)
	})
	do("fork_bomb", func() {
		done := make(chan advRun, 1)
		go func() {
			done <- run(nil, "--image", busybox, "--pids", "64", "--timeout", "30s", "--", "sh", "-c", "f(){ f | f & }; f; sleep 5; exit 3")
		}()
		for i := 0; i < 5 && r.hostTrue == nil; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			r.hostTrue = exec.CommandContext(ctx, "/bin/true").Run()
			cancel()
		}
		r.forkBomb = <-done
	})
	do("thread_bomb", func() {
		// Memory to spare: under gVisor the bomb must end at the sentry's
		// thread ceiling, not at the memory limit; and time to spare: with
		// the other runs at once on two loaded cores it took 21 to 44 s to
		// reach it.
		r.threads = run(nil, "--pids", "64", "--memory", "1GiB", "--timeout", "120s", "--", "python3", "-c", threadBomb)
	})
	do("memory_hog", func() {
		r.memory = run(nil, "--memory", "128MiB", "--timeout", "60s", "--", "python3", "-c", "a = []\nwhile True: a.append(bytearray(8 << 20))")
	})
	do("fill", func() { r.fill = run(nil, "--timeout", "60s", "--", "python3", "-c", fillScript) })
	do("cpu_spin", func() {
		r.cpuSpin = run(nil, "--image", busybox, "--timeout", "2s", "--", "sh", "-c", "while :; do :; done")
	})
	do("sleep", func() { r.sleeper = run(nil, "--image", busybox, "--timeout", "2s", "--", "sleep", "100000") })
	do("sigterm", func() {
		r.noTerm = run(nil, "--image", busybox, "--timeout", "2s", "--", "sh", "-c", "trap '' TERM INT HUP QUIT; while :; do sleep 1; done")
	})
	do("zombies", func() { r.zombies = run(nil, "--timeout", "30s", "--", "python3", "-c", zombieScript) })
	do("flood", func() { r.flood = run(nil, "--image", busybox, "--output-limit", "64KiB", "--", "yes") })
	do("huge_line", func() {
		r.hugeLine = run(nil, "--image", busybox, "--output-limit", "64KiB", "--", "sh", "-c", "yes | tr -d '\\n'")
	})
	do("stderr_flood", func() {
		r.errFlood = run(nil, "--image", busybox, "--output-limit", "64KiB", "--", "sh", "-c", "yes >&2")
	})
	do("binary", func() { r.binary = run(nil, "--", "python3", "-c", binaryScript, escapes) })
	do("fake", func() {
		r.fake = run(nil, "--image", busybox, "--", "sh", "-c", `printf '%s\n' "$1"; printf '%s\n' "$1" >&2; exit 3`, "sh", fakeResult)
	})
	wg.Wait()
	t.Logf("runs: %s", strings.Join(took, ", "))
	r.parseProbe()
	return r
}

// parseProbe reads the probe's lines.
func (r *advRuns) parseProbe() {
	r.lines = map[string][2]string{}
	for _, line := range strings.Split(string(r.probe.res.Stdout.Head), "\n") {
		if f := strings.SplitN(line, " ", 3); len(f) == 3 {
			r.lines[f[0]] = [2]string{f[1], strings.TrimSpace(f[2])}
		}
	}
}

// errnoIs is how the probe prints a refusal.
func errnoIs(e syscall.Errno) string { return "errno=" + strconv.Itoa(int(e)) }

// line is the probe's line for name.
func (r *advRuns) line(name string) (result, detail string, err error) {
	l, ok := r.lines[name]
	if !ok {
		return "", "", fmt.Errorf("the probe printed no %q line (reason %s exit %d, err %v); stderr %q", name,
			r.probe.res.Reason, r.probe.res.ExitCode, r.probe.err, clip(r.probe.res.Stderr.Head))
	}
	return l[0], l[1], nil
}

// probeDone checks that the probe ran to its end.
func (r *advRuns) probeDone() error {
	if err := r.probe.ended(runner.ReasonExited, 0); err != nil {
		return fmt.Errorf("the probe did not finish: %w", err)
	}
	return r.expect("done", "ok")
}

func (r *advRuns) expect(name, want string) error {
	got, detail, err := r.line(name)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%s: got %s (%s), want %s", name, got, detail, want)
	}
	return nil
}

// runcMasked is what reading a masked /proc file gives under runc: the
// runtime binds /dev/null over it when the host kernel has it, and there
// is nothing to read when it does not.
func runcMasked(path string) (result, outcome string) {
	if _, err := os.Stat(path); err != nil {
		return errnoIs(syscall.ENOENT), "ENOENT (absent on this host)"
	}
	return "empty", "empty (masked)"
}

// gvisorOr returns g under gVisor and r under runc.
func gvisorOr[T any](g, r T) T {
	if isolationName == "gvisor" {
		return g
	}
	return r
}

func checkAll(checks ...func() error) func() error {
	return func() error {
		var errs []error
		for _, c := range checks {
			if c != nil {
				errs = append(errs, c())
			}
		}
		return errors.Join(errs...)
	}
}

func advCases(h *advHost, r *advRuns) []advCase {
	var cs []advCase
	add := func(group, name, outcome, layer string, check func() error) {
		cs = append(cs, advCase{group, name, outcome, layer, check})
	}
	// refused is an attempt the probe made that must fail with want.
	refused := func(group, name, layer string, want syscall.Errno, host ...func() error) {
		add(group, name, unix.ErrnoName(want), layer, checkAll(append([]func() error{func() error { return r.expect(name, errnoIs(want)) }}, host...)...))
	}
	detailIs := func(name, result, want string) func() error {
		return func() error {
			got, detail, err := r.line(name)
			if err != nil {
				return err
			}
			if got != result || detail != want {
				return fmt.Errorf("%s: got %s %q, want %s %q", name, got, detail, result, want)
			}
			return nil
		}
	}
	// Network: the sandbox has its own loopback and nothing else.
	noRoute := func(name string) { refused("network", name, layerConfig, syscall.ENETUNREACH) }
	noRoute("egress_testnet")
	noRoute("egress_udp")
	noRoute("egress_ipv6")
	noRoute("metadata")
	// The sandbox's own loopback is up in every mode, with nothing on the
	// host's port.
	refused("network", "host_loopback", layerConfig, syscall.ECONNREFUSED, h.noneAccepted(&h.acceptTCP, "127.0.0.1 listener"))
	refused("network", "other_sandbox", layerConfig, syscall.ECONNREFUSED, func() error {
		if p := r.peer; p.err != nil {
			return p.err
		}
		if bytes.Contains(r.peer.rest, []byte("accepted")) {
			return fmt.Errorf("the peer sandbox accepted a connection: %q", r.peer.rest)
		}
		return nil
	})
	add("network", "dns", "EAI_AGAIN", layerConfig, detailIs("dns", "gaierror", strconv.Itoa(-3)))
	// Without CAP_NET_RAW; under gVisor, runsc also runs without --net-raw.
	refused("network", "raw_socket", layerConfig, syscall.EPERM)
	// The profile allows socket() for AF_UNIX, AF_INET and AF_INET6 only.
	for _, name := range []string{"packet_socket", "netlink_socket", "vsock_socket", "alg_socket"} {
		refused("network", name, layerSeccomp, syscall.EPERM)
	}
	// Abstract unix sockets belong to a network namespace.
	refused("network", "host_abstract_socket", layerConfig, syscall.ECONNREFUSED, h.noneAccepted(&h.acceptAbs, "abstract socket"))
	refused("network", "host_unix_socket", layerConfig, syscall.ENOENT, h.noneAccepted(&h.acceptUn, "unix socket"))
	add("network", "interfaces", "lo only", layerConfig, detailIs("interfaces", "list", "lo"))
	add("network", "self_loopback", "allowed", layerConfig, func() error { return r.expect("self_loopback", "ok") })

	// Filesystem.
	// gVisor checks permissions before the read-only mount; Linux checks
	// the read-only superblock first.
	refused("filesystem", "write_root", layerConfig, gvisorOr(syscall.EACCES, syscall.EROFS), h.imageUnchanged)
	refused("filesystem", "write_etc", layerConfig, syscall.EACCES)
	refused("filesystem", "write_image_binary", layerConfig, syscall.EACCES)
	refused("filesystem", "proc_sys_hostname", layerConfig, syscall.EACCES, h.hostnameUnchanged)
	sysrq, sysrqOutcome := errnoIs(syscall.EACCES), "EACCES"
	if _, err := os.Stat("/proc/sysrq-trigger"); err != nil && isolationName == "seccomp" {
		sysrq, sysrqOutcome = errnoIs(syscall.ENOENT), "ENOENT (absent on this host)"
	}
	add("filesystem", "proc_sysrq_trigger", sysrqOutcome, gvisorOr(layerGVisor, layerConfig), func() error { return r.expect("proc_sysrq_trigger", sysrq) })
	// gVisor has no drop_caches.
	refused("filesystem", "proc_sys_vm", gvisorOr(layerGVisor, layerConfig), gvisorOr(syscall.ENOENT, syscall.EACCES))
	// gVisor has none of these files; runc masks them.
	for _, name := range []string{"kcore", "keys", "timer_list", "sched_debug", "interrupts"} {
		want, outcome := errnoIs(syscall.ENOENT), "ENOENT (gVisor has none)"
		if isolationName == "seccomp" {
			want, outcome = runcMasked("/proc/" + name)
		}
		add("filesystem", "proc_"+name, outcome, gvisorOr(layerGVisor, layerConfig), func() error { return r.expect("proc_"+name, want) })
	}
	add("filesystem", "proc_cmdline", gvisorOr("gVisor's own text", "empty (masked)"), gvisorOr(layerGVisor, layerConfig), func() error {
		got, detail, err := r.line("proc_cmdline")
		if err != nil {
			return err
		}
		text, _ := hex.DecodeString(detail)
		if strings.Contains(string(text), h.cmdline) {
			return fmt.Errorf("/proc/cmdline shows the host's: %q", text)
		}
		if isolationName == "gvisor" {
			// The sentry's fixed, synthetic command line.
			if got != "read" || !strings.HasPrefix(string(text), "BOOT_IMAGE=/vmlinuz-") || !strings.Contains(string(text), "gvisor") {
				return fmt.Errorf("/proc/cmdline: %s %q", got, text)
			}
			return nil
		}
		return r.expect("proc_cmdline", "empty")
	})
	add("filesystem", "sys_firmware", "empty", layerConfig, detailIs("sys_firmware", "list", "-"))
	// gVisor's devices are its own: fuse and net/tun are served by the
	// sentry, not the host.
	devs := gvisorOr("char,fd,full,fuse,net,null,ptmx,pts,random,shm,stderr,stdin,stdout,tty,urandom,zero",
		"fd,full,mqueue,null,ptmx,pts,random,shm,stderr,stdin,stdout,tty,urandom,zero")
	add("filesystem", "dev_standard_only", "no disks, mem or kmsg", gvisorOr(layerGVisor, layerConfig), checkAll(detailIs("dev", "list", devs), func() error {
		_, detail, _ := r.line("dev")
		for _, bad := range []string{"sda", "vda", "mem", "kmem", "port", "kmsg", "vsock", "kvm"} {
			if slices.Contains(strings.Split(detail, ","), bad) {
				return fmt.Errorf("/dev/%s is there", bad)
			}
		}
		return nil
	}))
	refused("filesystem", "mknod", layerConfig, syscall.EPERM)
	refused("filesystem", "mount_tmpfs", layerSeccomp, syscall.EPERM)
	refused("filesystem", "mount_proc", layerSeccomp, syscall.EPERM)
	add("filesystem", "setuid_files", "none in the image", layerConfig, checkAll(
		func() error { return r.expect("setuid_files", "none") },
		detailIs("no_new_privs", "value", "1")))
	add("filesystem", "inherited_fds", "only 0, 1, 2", layerAirlock, func() error { return r.expect("inherited_fds", "none") })
	if r.live || r.restored {
		// A live sandbox's default working directory is its workspace.
		add("filesystem", "cwd", "the workspace", layerAirlock, detailIs("cwd", "path", runner.WorkspaceDir))
	} else {
		add("filesystem", "cwd", "the image's workdir", layerAirlock, detailIs("cwd", "path", h.imageWorkdir))
	}
	refused("filesystem", "host_file", layerConfig, syscall.ENOENT, h.fileUnchanged)
	leftover := func(name, area, want string) {
		wrote := func() error { return r.expect(name+"_write", "ok") }
		if !r.live {
			add("filesystem", name, "next run's /"+area+" is empty", layerAirlock, checkAll(wrote, func() error { return emptyListing(r.after, area+":") }))
			return
		}
		// A live sandbox keeps /tmp and /out from one exec to the next
		// (that is what it is for): the probe's next exec finds exactly
		// what the probe left there, and another live sandbox none of it.
		add("filesystem", name, "kept for the next exec; another sandbox's /"+area+" is empty", layerAirlock, checkAll(wrote,
			func() error {
				if got, err := listing(r.after, area+":"); err != nil || got != want {
					return errors.Join(err, fmt.Errorf("the next exec's /%s holds %q, want %q", area, got, want))
				}
				return nil
			},
			func() error { return emptyListing(r.other, area+":") }))
	}
	// The probe made /tmp/mnt and /tmp/cg as mount points.
	leftover("leftover_tmp", "tmp", "airlock-leftover cg mnt")
	leftover("leftover_out", "out", "leftover.txt")

	// Privilege.
	add("privilege", "capabilities", "all sets empty", layerConfig, detailIs("capabilities", "sets",
		"CapInh=0000000000000000 CapPrm=0000000000000000 CapEff=0000000000000000 CapBnd=0000000000000000 CapAmb=0000000000000000"))
	add("privilege", "no_new_privs", "set", layerConfig, detailIs("no_new_privs", "value", "1"))
	// dockerd adds the primary group as a supplementary one.
	groups := "-"
	if engineName == "docker" {
		groups = "65534"
	}
	add("privilege", "identity", "uid and gid 65534", layerConfig, detailIs("identity", "ids", "uid=65534,65534,65534 gid=65534,65534,65534 groups="+groups))
	refused("privilege", "setuid_root", layerConfig, syscall.EPERM)
	refused("privilege", "setgid_root", layerConfig, syscall.EPERM)
	refused("privilege", "setgroups", layerConfig, syscall.EPERM)
	for _, name := range []string{"capset", "ptrace_traceme", "ptrace_attach", "init_module", "finit_module", "kexec_load",
		"keyctl", "add_key", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "unshare_user", "unshare_mount",
		"clone_newuser", "setns", "mount_cgroup", "chroot", "pivot_root", "reboot", "open_by_handle_at", "iopl", "syslog"} {
		refused("privilege", name, layerSeccomp, syscall.EPERM, h.initUnchanged)
	}
	refused("privilege", "sethostname", layerSeccomp, syscall.EPERM, h.hostnameUnchanged)
	// dockerd mounts the cgroup hierarchies read-only on a tmpfs only
	// root may write (under gVisor, the sentry's own cgroupfs on a
	// read-only tmpfs); the oci engine mounts no cgroupfs, leaving the
	// read-only sysfs directory, where runc's kernel says ENOENT.
	cgroupWrite := map[string]syscall.Errno{
		"docker gvisor":  syscall.EROFS,
		"oci gvisor":     syscall.EACCES,
		"docker seccomp": syscall.EACCES,
		"oci seccomp":    syscall.ENOENT,
	}[engineName+" "+isolationName]
	add("privilege", "cgroup_release_agent", unix.ErrnoName(cgroupWrite)+"; no writable release_agent", layerConfig,
		detailIs("cgroup_write", errnoIs(cgroupWrite), "writable release_agent: none"))
	refused("privilege", "kill_host_pid", layerConfig, syscall.ESRCH)
	if r.live || r.restored {
		// In a live sandbox pid 1 is airlock's init, and the probe is an
		// exec beside it: nothing else, and nothing of the host or of the
		// other sandbox, whose listener runs meanwhile. The oci engine's
		// gVisor sandboxes also hold two of airlock's agent processes: the
		// exec agent, the probe's parent, and the spawner the init starts
		// (internal/agent/spawner.go). A restored sandbox also holds the
		// warm program its snapshot holds, asleep.
		withAgent := engineName == "oci" && isolationName == "gvisor"
		want, agentsWanted, programs := "only its own and the init's", 0, []string{"python3"}
		if withAgent {
			want, agentsWanted = "only its own, the init's, the exec agent's and the spawner's", 2
		}
		if r.restored {
			want, programs = want+", and the warm program's", []string{"sleep", "python3"}
		}
		add("privilege", "pids_visible", want, layerConfig, func() error {
			_, detail, err := r.line("pid_programs")
			if err != nil {
				return err
			}
			var progs []string
			agents := 0
			for _, e := range strings.Split(detail, ",") {
				pid, prog, _ := strings.Cut(e, "=")
				switch {
				case withAgent && prog == "/.airlock-agent":
					agents++
				case pid != "1":
					progs = append(progs, prog)
				}
			}
			// A live sandbox's probe may be started through a wrapper of
			// the engine's: its name is checked only in a restored one.
			if !strings.HasPrefix(detail, "1=") || agents != agentsWanted || len(progs) != len(programs) || (r.restored && !slices.Equal(progs, programs)) {
				return fmt.Errorf("processes %s; want %s", detail, want)
			}
			return nil
		})
	} else {
		add("privilege", "pids_visible", "only its own", layerConfig, detailIs("pids_visible", "list", "1"))
	}
	// Linux drops a SIGKILL sent to a namespace's init from inside it;
	// gVisor delivers it, so the program ends its own sandbox, and the
	// killer's own echo may or may not get out before the sandbox is torn
	// down. Either way the host's pid 1 is untouched.
	//
	// In a live sandbox pid 1 is airlock's init, not the program, and the
	// sandbox is meant to outlive each exec: under runc the next exec runs
	// as before. Under gVisor the killer ends its own sandbox, which
	// airlock reports as lost (sandbox_lost, exit 69) from the next exec
	// on; the killer's own exec may be told first, or see its SIGKILL
	// (137) when the exec ends before the sandbox does.
	killEnded := func() error { return r.after.ended(runner.ReasonExited, gvisorOr(137, 0)) }
	killOutcome := gvisorOr("kills the sandbox's own init (exit 137)", "ignored")
	if r.restored {
		// The killer is an exec beside airlock's init: it ends its own
		// sandbox, and is told so, or sees its own SIGKILL first.
		killOutcome = "kills the sandbox's init: exit 137 or sandbox_lost"
		killEnded = func() error {
			if r.after.ended(runner.ReasonExited, 137) != nil && sandboxLost(r.after) != nil {
				return fmt.Errorf("the killer's exec: %w; or %w", r.after.ended(runner.ReasonExited, 137), sandboxLost(r.after))
			}
			return nil
		}
	}
	if r.live {
		killOutcome = gvisorOr("kills the sandbox's init: sandbox_lost from the next exec on", "ignored; the next exec runs")
		killEnded = func() error {
			if isolationName == "seccomp" {
				if err := r.next.ended(runner.ReasonExited, 0); err != nil || string(r.next.res.Stdout.Head) != "next\n" {
					return errors.Join(err, fmt.Errorf("the next exec: stdout %q", r.next.res.Stdout.Head))
				}
				return r.after.ended(runner.ReasonExited, 0)
			}
			if err := sandboxLost(r.next); err != nil {
				return fmt.Errorf("the next exec: %w", err)
			}
			if r.after.ended(runner.ReasonExited, 137) != nil && sandboxLost(r.after) != nil {
				return fmt.Errorf("the killer's exec: %w; or %w", r.after.ended(runner.ReasonExited, 137), sandboxLost(r.after))
			}
			return nil
		}
	}
	add("privilege", "kill_pid1", killOutcome, gvisorOr(layerGVisor, layerConfig), checkAll(
		func() error {
			if err := killEnded(); err != nil {
				return err
			}
			out := string(r.after.res.Stdout.Head)
			ok := strings.HasSuffix(out, "\nkill:0\nalive\n")
			if isolationName == "gvisor" {
				ok = !strings.Contains(out, "alive") && (strings.HasSuffix(out, "\nkill:0\n") || !strings.Contains(out, "kill:"))
			}
			if !ok {
				return fmt.Errorf("stdout %q", out)
			}
			return nil
		},
		h.initUnchanged))

	// Resources.
	// atLimit checks a run ended by reason, airlock exiting code.
	atLimit := func(run *advRun, reason runner.Reason, code int) func() error {
		return func() error {
			if err := run.ended(reason, 0); err != nil {
				return err
			}
			if run.cli.code != code {
				return fmt.Errorf("airlock exit %d, want %d", run.cli.code, code)
			}
			return nil
		}
	}
	forkBomb, forkBombEnded := "pids_limit", atLimit(&r.forkBomb, runner.ReasonPidsLimit, 122)
	memoryHog, memoryHogEnded := "oom", atLimit(&r.memory, runner.ReasonOOM, 137)
	if r.restored {
		// An exec's program is not the sandbox's: under gVisor the
		// sentry, whose threads and memory the cgroup counts, ends at
		// the limit, and the whole sandbox with it.
		lostAt := func(run *advRun, limit string) func() error {
			return func() error {
				if err := sandboxLost(*run); err != nil {
					return err
				}
				if !strings.Contains(run.res.Error, limit) {
					return fmt.Errorf("error %q does not name the %s", run.res.Error, limit)
				}
				return nil
			}
		}
		forkBomb, forkBombEnded = "sandbox_lost (exit 69), naming the pids limit", lostAt(&r.forkBomb, "pids limit")
		memoryHog, memoryHogEnded = "sandbox_lost (exit 69), naming the memory limit", lostAt(&r.memory, "memory limit")
	}
	add("resources", "fork_bomb", forkBomb, layerConfig, checkAll(
		forkBombEnded,
		func() error {
			if r.hostTrue != nil {
				return fmt.Errorf("the host could not run /bin/true during the fork bomb: %v", r.hostTrue)
			}
			return nil
		}))
	// gVisor serves guest threads on a few host threads, so the host pids
	// cgroup never fills: the bomb runs past --pids to about 4,000
	// threads, where gVisor ends the sandbox with SIGKILL. Under runc the
	// pids cgroup refuses the 64th task.
	add("resources", "thread_bomb", gvisorOr("exited 137: gVisor's SIGKILL at ~4,000 threads", "pids_limit"), gvisorOr(layerGVisor, layerConfig), checkAll(
		func() error {
			if isolationName == "gvisor" {
				return r.threads.ended(runner.ReasonExited, 137)
			}
			return r.threads.ended(runner.ReasonPidsLimit, 0)
		},
		func() error {
			if left := leftOf(r.threads.res.ID); len(left) > 0 {
				return fmt.Errorf("left behind: %v", left)
			}
			return nil
		}))
	add("resources", "memory_hog", memoryHog, layerConfig, memoryHogEnded)
	fillLine := func(prefix, want string) func() error {
		return func() error {
			if err := r.fill.ended(runner.ReasonExited, 0); err != nil {
				return err
			}
			for _, l := range strings.Split(string(r.fill.res.Stdout.Head), "\n") {
				if strings.HasPrefix(l, prefix+" ") {
					if l != prefix+" "+want {
						return fmt.Errorf("%q, want %q", l, prefix+" "+want)
					}
					return nil
				}
			}
			return fmt.Errorf("no %s line: %q", prefix, r.fill.res.Stdout.Head)
		}
	}
	add("resources", "tmp_fill", "ENOSPC at 64MiB; run exits", layerConfig, fillLine("tmp", fmt.Sprintf("errno=%d bytes=%d", syscall.ENOSPC, 64<<20)))
	add("resources", "out_fill", "ENOSPC at 64MiB; run exits", layerAirlock, fillLine("out", fmt.Sprintf("errno=%d bytes=%d", syscall.ENOSPC, 64<<20)))
	add("resources", "out_files", "ENOSPC at the inode cap", layerAirlock, fillLine("out_files", fmt.Sprintf("errno=%d files=%d", syscall.ENOSPC, 1000+64-1)))
	add("resources", "fd_exhaustion", "EMFILE at 1024", layerConfig, detailIs("fd_exhaustion", errnoIs(syscall.EMFILE), "opened=1021 nofile=1024"))
	timedOut := func(run *advRun) func() error {
		return func() error {
			if err := run.ended(runner.ReasonTimeout, 0); err != nil {
				return err
			}
			if run.cli.code != 124 || run.res.DurationMS < 2000 || run.cli.wall > 30*time.Second {
				return fmt.Errorf("airlock exit %d after %v (program %dms); want 124 soon after 2s", run.cli.code, run.cli.wall, run.res.DurationMS)
			}
			return nil
		}
	}
	add("resources", "cpu_spin", "timeout", layerAirlock, timedOut(&r.cpuSpin))
	add("resources", "sleep_forever", "timeout", layerAirlock, timedOut(&r.sleeper))
	add("resources", "ignore_sigterm", "timeout (SIGKILL)", layerAirlock, timedOut(&r.noTerm))
	add("resources", "zombie_flood", "exits; nothing left", layerConfig, checkAll(
		func() error { return r.zombies.ended(runner.ReasonExited, 0) },
		func() error {
			if got := string(r.zombies.res.Stdout.Head); got != "zombies 200\n" {
				return fmt.Errorf("stdout %q, want 200 zombies", got)
			}
			if left := leftOf(r.zombies.res.ID); len(left) > 0 {
				return fmt.Errorf("left behind: %v", left)
			}
			return nil
		}))

	// Output.
	capped := func(run *advRun, s func(runner.Result) runner.Stream, head []byte) func() error {
		return func() error {
			if err := run.ended(runner.ReasonOutputLimit, 0); err != nil {
				return err
			}
			st := s(run.res)
			if run.cli.code != 123 || !st.Truncated || st.Bytes <= 64<<10 || len(st.Head) != 64<<10 || !bytes.Equal(st.Head[:len(head)], head) {
				return fmt.Errorf("airlock exit %d; stream truncated %v, bytes %d, head %d bytes %q…", run.cli.code, st.Truncated, st.Bytes, len(st.Head), clip(st.Head[:min(len(st.Head), 64)]))
			}
			if run.cli.maxRSS > 100<<20 {
				return fmt.Errorf("airlock peak RSS %d MiB", run.cli.maxRSS>>20)
			}
			return nil
		}
	}
	stdout := func(r runner.Result) runner.Stream { return r.Stdout }
	stderr := func(r runner.Result) runner.Stream { return r.Stderr }
	add("output", "stdout_flood", "output_limit", layerAirlock, capped(&r.flood, stdout, []byte("y\ny\ny\n")))
	add("output", "huge_line", "output_limit, head kept", layerAirlock, capped(&r.hugeLine, stdout, bytes.Repeat([]byte("y"), 64<<10)))
	add("output", "stderr_flood", "output_limit", layerAirlock, checkAll(capped(&r.errFlood, stderr, []byte("y\ny\ny\n")), func() error {
		if len(r.errFlood.res.Stdout.Head) != 0 {
			return fmt.Errorf("stdout %q", clip(r.errFlood.res.Stdout.Head))
		}
		return nil
	}))
	add("output", "binary_bytes", "kept exactly", layerAirlock, checkAll(
		func() error { return r.binary.ended(runner.ReasonExited, 0) },
		func() error {
			var want []byte
			for i := 0; i < 4; i++ {
				for b := 0; b < 256; b++ {
					want = append(want, byte(b))
				}
			}
			if !bytes.Equal(r.binary.res.Stdout.Head, want) {
				return fmt.Errorf("stdout %q", clip(r.binary.res.Stdout.Head))
			}
			return nil
		}))
	add("output", "escape_sequences", "kept exactly, escaped in JSON", layerAirlock, checkAll(
		func() error { return r.binary.ended(runner.ReasonExited, 0) },
		func() error {
			if got := string(r.binary.res.Stderr.Head); got != escapes {
				return fmt.Errorf("stderr %q, want %q", got, escapes)
			}
			if i := strings.IndexAny(r.binary.cli.stdout, "\x1b\x07\r"); i >= 0 {
				return fmt.Errorf("airlock's JSON holds a raw control byte at %d: %q", i, r.binary.cli.stdout[max(0, i-20):min(len(r.binary.cli.stdout), i+20)])
			}
			return nil
		}))
	add("output", "fake_result", "ignored: a string in the result", layerAirlock, checkAll(
		func() error { return r.fake.ended(runner.ReasonExited, 3) },
		func() error {
			if r.fake.cli.code != 3 || r.fake.res.ID == "fake" || string(r.fake.res.Stdout.Head) != fakeResult+"\n" || string(r.fake.res.Stderr.Head) != fakeResult+"\n" {
				return fmt.Errorf("airlock exit %d id %q stdout %q stderr %q", r.fake.cli.code, r.fake.res.ID, r.fake.res.Stdout.Head, r.fake.res.Stderr.Head)
			}
			return nil
		}))

	// Secrets.
	add("secrets", "environment", "image env and --env only", layerAirlock, func() error {
		want := []string{"GIVEN"}
		for _, kv := range h.imageEnv {
			k, _, _ := strings.Cut(kv, "=")
			want = append(want, k)
		}
		// dockerd always sets HOSTNAME, to the sandbox's name.
		if engineName == "docker" {
			want = append(want, "HOSTNAME")
		}
		slices.Sort(want)
		if err := detailIs("environment", "names", strings.Join(want, ","))(); err != nil {
			return err
		}
		_, env, _ := r.line("environ")
		raw, _ := hex.DecodeString(env)
		if bytes.Contains(raw, []byte(h.secret)) || bytes.Contains(r.probe.res.Stdout.Head, []byte(h.secret)) {
			return fmt.Errorf("airlock's environment reached the sandbox")
		}
		vars := strings.Split(string(raw), "\x00")
		if !slices.Contains(vars, "GIVEN=yes") || (engineName == "docker" && !slices.Contains(vars, "HOSTNAME=sandbox")) {
			return fmt.Errorf("environment %q", vars)
		}
		// A live sandbox's HOME is its workspace (the image sets HOME too).
		if (r.live || r.restored) && !slices.Contains(vars, "HOME="+runner.WorkspaceDir) {
			return fmt.Errorf("environment %q: HOME is not the workspace", vars)
		}
		return nil
	})
	refused("secrets", "docker_socket", layerConfig, syscall.ENOENT)
	refused("secrets", "docker_socket_run", layerConfig, syscall.ENOENT)
	refused("secrets", "containerd_socket", layerConfig, syscall.ENOENT)
	if r.restored {
		// Its own name, as its record shows: sandboxes restored from one
		// snapshot must differ (isolation.RestoredHostname).
		add("secrets", "hostname", "sandbox-<12 hex digits>, the sandbox's own", layerAirlock, func() error {
			pol := r.probe.res.Policy
			if pol == nil || !regexp.MustCompile(`^sandbox-[0-9a-f]{12}$`).MatchString(pol.Hostname) {
				return fmt.Errorf("the result's policy names host %+v", pol)
			}
			return detailIs("hostname", "names", pol.Hostname+","+pol.Hostname)()
		})
	} else {
		add("secrets", "hostname", "sandbox", layerAirlock, detailIs("hostname", "names", "sandbox,sandbox"))
	}
	hexLine := func(name string) (string, error) {
		got, detail, err := r.line(name)
		if err != nil || got != "read" {
			return "", errors.Join(err, fmt.Errorf("%s: %s %s", name, got, detail))
		}
		if detail == "-" {
			return "", nil
		}
		b, err := hex.DecodeString(detail)
		return string(b), err
	}
	// dockerd bind-mounts its own /etc/hostname, hosts and resolv.conf; the
	// oci engine shows the image's.
	imageFiles := layerConfig
	if engineName == "oci" {
		imageFiles = "none: the image's own file"
	}
	add("secrets", "etc_hostname", "not the host's name", imageFiles, func() error {
		text, err := hexLine("etc_hostname")
		if err != nil {
			return err
		}
		if slices.Contains(strings.Fields(text), h.hostname) {
			return fmt.Errorf("/etc/hostname names the host: %q", text)
		}
		return nil
	})
	// The default image has no /etc/hosts.
	add("secrets", "etc_hosts", "not the host's names", map[string]string{"docker": layerConfig, "oci": "the image's own neutral file"}[engineName], func() error {
		text, err := hexLine("etc_hosts")
		if err != nil {
			return err
		}
		if slices.Contains(strings.Fields(text), h.hostname) {
			return fmt.Errorf("/etc/hosts names the host: %q", text)
		}
		return nil
	})
	refused("secrets", "machine_id", layerConfig, syscall.ENOENT, func() error {
		_, detail, _ := r.line("machine_id")
		if h.machineID != "" && strings.Contains(detail, h.machineID) {
			return fmt.Errorf("the host's machine-id")
		}
		return nil
	})
	add("secrets", "resolv_conf", "no host resolvers", imageFiles, func() error {
		text, err := hexLine("resolv_conf")
		if err != nil {
			return err
		}
		for _, ns := range h.resolvers {
			if strings.Contains(text, ns) {
				return fmt.Errorf("/etc/resolv.conf names the host's resolver %s: %q", ns, text)
			}
		}
		return nil
	})

	// Lifecycle.
	add("lifecycle", "timeout_leaves_nothing", "no container, cgroup, bundle", layerAirlock, func() error {
		if left := leftOf(r.cpuSpin.res.ID, r.sleeper.res.ID, r.noTerm.res.ID); len(left) > 0 {
			return fmt.Errorf("left behind: %v", left)
		}
		return nil
	})
	add("lifecycle", "interrupt_leaves_nothing", "killed; nothing left", layerAirlock, func() error {
		p := r.peer
		if p.err != nil {
			return p.err
		}
		if p.code != 130 {
			return fmt.Errorf("the interrupted peer's airlock exit %d, want 130; stderr %s", p.code, p.stderr.String())
		}
		if left := leftOf(p.id); len(left) > 0 {
			return fmt.Errorf("left behind: %v", left)
		}
		return nil
	})
	add("lifecycle", "distinct_ids", "every run its own id", layerAirlock, func() error {
		seen := map[string]bool{}
		for _, run := range []advRun{r.probe, r.after, r.forkBomb, r.threads, r.memory, r.fill, r.cpuSpin, r.sleeper, r.noTerm,
			r.zombies, r.flood, r.hugeLine, r.errFlood, r.binary, r.fake} {
			if run.res.ID == "" || seen[run.res.ID] {
				return fmt.Errorf("id %q empty or seen before", run.res.ID)
			}
			seen[run.res.ID] = true
		}
		if seen[r.peer.id] {
			return fmt.Errorf("the peer shares id %q", r.peer.id)
		}
		return nil
	})
	return cs
}

// emptyListing checks that run printed prefix and nothing after it.
func emptyListing(run advRun, prefix string) error {
	rest, err := listing(run, prefix)
	if err == nil && rest != "" {
		return fmt.Errorf("%s %q: left there by another sandbox", prefix, rest)
	}
	return err
}

// listing is what run printed after prefix on the line starting with it.
func listing(run advRun, prefix string) (string, error) {
	if run.err != nil {
		return "", run.err
	}
	for _, l := range strings.Split(string(run.res.Stdout.Head), "\n") {
		if strings.HasPrefix(l, prefix) {
			return strings.TrimSpace(strings.TrimPrefix(l, prefix)), nil
		}
	}
	return "", fmt.Errorf("no %q line: %q %q", prefix, run.res.Stdout.Head, run.res.Stderr.Head)
}

// TestAdversarial attacks the sandbox as a hostile program would: it tries
// to reach the network and the host, raise privilege, exhaust resources,
// forge its result and find secrets. Each attempt is a subtest with the
// exact outcome expected for the engine and isolation under test, and the
// log ends with a matrix of what stops each one.
//
// Most attempts share one python3 run (testdata/adversarial/probe.py) that
// prints a line per attempt; the rest need runs of their own, which go a
// few at a time.
func TestAdversarial(t *testing.T) {
	h := newAdvHost(t)
	start := time.Now()
	r := h.runAll(t, advRunJSON)
	t.Logf("runs took %v", time.Since(start).Round(time.Millisecond))
	if err := r.probeDone(); err != nil {
		t.Error(err)
	}
	cases := advCases(h, r)
	if len(cases) < 60 {
		t.Errorf("only %d cases", len(cases))
	}
	advReport(t, "", cases)
}

// advGroups keeps the cases of the groups named; a group with none is an
// error.
func advGroups(t *testing.T, all []advCase, groups ...string) []advCase {
	t.Helper()
	var cases []advCase
	for _, c := range all {
		if slices.Contains(groups, c.group) {
			cases = append(cases, c)
		}
	}
	for _, g := range groups {
		if !slices.ContainsFunc(cases, func(c advCase) bool { return c.group == g }) {
			t.Errorf("no %s cases", g)
		}
	}
	return cases
}

// advReport checks each case in a subtest of its own and logs the matrix
// of outcomes and the layers that stop them.
func advReport(t *testing.T, how string, cases []advCase) {
	t.Helper()
	failed := map[string]error{}
	for _, c := range cases {
		t.Run(c.group+"/"+c.name, func(t *testing.T) {
			if err := c.check(); err != nil {
				failed[c.name] = err
				t.Error(err)
			}
		})
	}
	var m strings.Builder
	fmt.Fprintf(&m, "%d cases%s, engine %s, isolation %s\n| group | case | outcome | layer |\n| --- | --- | --- | --- |\n", len(cases), how, engineName, isolationName)
	for _, c := range cases {
		mark := ""
		if failed[c.name] != nil {
			mark = " **FAILED**"
		}
		fmt.Fprintf(&m, "| %s | %s | %s%s | %s |\n", c.group, c.name, c.outcome, mark, c.layer)
	}
	// The reasons again, last: a log cut to its head and tail keeps them.
	for _, c := range cases {
		if err := failed[c.name]; err != nil {
			fmt.Fprintf(&m, "FAILED %s/%s: %s\n", c.group, c.name, strings.ReplaceAll(err.Error(), "\n", "; "))
		}
	}
	t.Log("\n" + m.String())
}
