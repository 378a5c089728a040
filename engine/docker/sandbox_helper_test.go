package docker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/asm"
)

// helperFile writes the helper where the test can run it on the host.
func helperFile(t *testing.T) string {
	t.Helper()
	p, err := installHelper(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	if !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return ee.ExitCode()
}

func TestHelperInitIgnoresSIGCHLDAndWaits(t *testing.T) {
	cmd := exec.Command(helperFile(t))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	// SIGCHLD ignored is what makes the kernel reap orphans for it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/status")
		var ign uint64
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "SigIgn:\t"); ok {
				ign, _ = strconv.ParseUint(v, 16, 64)
			}
		}
		if ign&(1<<(syscall.SIGCHLD-1)) != 0 && strings.Contains(string(b), "State:\tS") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("init never settled ignoring SIGCHLD:\n%s", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// It stays: only a signal ends it.
	time.Sleep(100 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("init exited: %v", err)
	}
}

// wrap runs the helper's exec mode and returns its stdout, its stderr less
// the pid, the pid it reported and its exit code.
func wrap(t *testing.T, env []string, argv ...string) (string, string, int32, int) {
	t.Helper()
	cmd := exec.Command(helperFile(t), append([]string{"x"}, argv...)...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	code := exitCode(t, cmd.Run())
	if errb.Len() < 4 {
		t.Fatalf("%q: no pid on stderr: %q", argv, errb.String())
	}
	pid := int32(binary.NativeEndian.Uint32(errb.Bytes()[:4]))
	if int(pid) != cmd.Process.Pid {
		t.Fatalf("%q: reported pid %d, ran as %d", argv, pid, cmd.Process.Pid)
	}
	return out.String(), errb.String()[4:], pid, code
}

func TestHelperExec(t *testing.T) {
	// Fields 5 and 6 of stat: process group and session, both its own.
	out, _, pid, code := wrap(t, []string{"PATH=/nonexistent::/bin:/usr/bin"}, "sh", "-c", `read -r l < /proc/$$/stat; set -- ${l#*) }; echo $3 $4`)
	if code != 0 || out != strconv.Itoa(int(pid))+" "+strconv.Itoa(int(pid))+"\n" {
		t.Fatalf("group and session: code %d, %q; want both %d", code, out, pid)
	}
	if out, _, _, code := wrap(t, nil, "echo", "default", "path"); code != 0 || out != "default path\n" {
		t.Fatalf("no PATH: code %d, %q", code, out)
	}
	if out, _, _, code := wrap(t, nil, "/bin/echo", "a", "", "b c"); code != 0 || out != "a  b c\n" {
		t.Fatalf("argv: code %d, %q", code, out)
	}
	if _, errs, _, code := wrap(t, []string{"PATH=/bin"}, "no-such-program"); code != 127 || errs != "airlock: cannot execute no-such-program\n" {
		t.Fatalf("missing program: code %d, %q", code, errs)
	}
	// There but not executable: 126, directly or found on PATH; a later
	// PATH entry still wins.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "data"), []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env  []string
		name string
		code int
	}{
		{[]string{"PATH=/bin"}, filepath.Join(dir, "data"), 126},
		{[]string{"PATH=" + dir}, "data", 126},
		{[]string{"PATH=/nonexistent:" + dir + ":/bin"}, "data", 126},
		{[]string{"PATH=" + filepath.Join(dir, "data") + ":/bin"}, "true", 0},
		{[]string{"PATH=" + dir + ":/bin"}, "true", 0},
		{[]string{"PATH=/bin"}, filepath.Join(dir, "none"), 127},
	} {
		if _, _, _, code := wrap(t, c.env, c.name); code != c.code {
			t.Errorf("%s on %v: code %d, want %d", c.name, c.env, code, c.code)
		}
	}
	if _, _, _, code := wrap(t, []string{"PATH=/bin"}, strings.Repeat("x", 9000)); code != 127 {
		t.Fatalf("overlong name: code %d", code)
	}
	if _, _, _, code := wrap(t, []string{"PATH=/bin"}, "sh", "-c", "exit 7"); code != 7 {
		t.Fatalf("exit code: %d", code)
	}
}

func TestHelperKillsTheGroup(t *testing.T) {
	h := helperFile(t)
	victim := exec.Command(h, "x", "sleep", "100")
	stderr, err := victim.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	var pid [4]byte
	_, rerr := io.ReadFull(stderr, pid[:])
	go func() { waited <- victim.Wait() }()
	if rerr != nil {
		victim.Process.Kill()
		t.Fatal(rerr)
	}
	killer := exec.Command(h, "k")
	killer.Stdin = bytes.NewReader(pid[:])
	if code := exitCode(t, killer.Run()); code != 0 {
		t.Fatalf("killer exited %d", code)
	}
	err = <-waited
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("victim: %v; want SIGKILL", err)
	}
	for name, in := range map[string][]byte{"empty": nil, "short": {1, 0}, "pid 1": {1, 0, 0, 0}, "pid 0": {0, 0, 0, 0}, "negative": {0xff, 0xff, 0xff, 0xff}} {
		k := exec.Command(h, "k")
		k.Stdin = bytes.NewReader(in)
		if code := exitCode(t, k.Run()); code != 2 {
			t.Errorf("%s: killer exited %d; want 2", name, code)
		}
	}
	if code := exitCode(t, exec.Command(h, "z").Run()); code != 2 {
		t.Errorf("unknown mode exited %d; want 2", code)
	}
}

func TestInstallHelperReplacesWhatIsNotIt(t *testing.T) {
	dir := t.TempDir()
	p, err := installHelper(dir)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o555 {
			t.Fatalf("%s: %v %v", what, fi, err)
		}
		if b, _ := os.ReadFile(p); !bytes.Equal(b, helperAMD64) {
			t.Fatalf("%s: wrong bytes", what)
		}
	}
	check("fresh")
	os.Chmod(p, 0o755)
	os.WriteFile(p, []byte("#!/bin/sh\necho pwned\n"), 0o755)
	if _, err := installHelper(dir); err != nil {
		t.Fatal(err)
	}
	check("tampered")
	target := filepath.Join(t.TempDir(), "elsewhere")
	os.WriteFile(target, []byte("keep"), 0o644)
	os.Remove(p)
	os.Symlink(target, p)
	if _, err := installHelper(dir); err != nil {
		t.Fatal(err)
	}
	check("symlink")
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatalf("the link's target was written: %q", b)
	}
	os.Chmod(dir, 0o777)
	if _, err := installHelper(dir); err == nil {
		t.Fatal("a world-writable helper directory was accepted")
	}
}

func TestPidReaderStripsThePid(t *testing.T) {
	var out bytes.Buffer
	r := &pidReader{w: &out, got: make(chan int32, 1)}
	in := append(binary.NativeEndian.AppendUint32(nil, 4242), "hello"...)
	for _, chunk := range [][]byte{in[:1], in[1:3], in[3:6], in[6:]} {
		if n, err := r.Write(chunk); n != len(chunk) || err != nil {
			t.Fatalf("write %q: %d %v", chunk, n, err)
		}
	}
	if pid := <-r.got; pid != 4242 || out.String() != "hello" {
		t.Fatalf("pid %d, output %q", pid, out.String())
	}
}

// Stdout waits for the helper's pid on stderr: what came before it is
// passed on once it comes, and kept from the program's output when it
// never does (dockerd's error for an exec the runtime did not start).
func TestStartGateHoldsStdoutUntilThePid(t *testing.T) {
	var out, errb bytes.Buffer
	gate := &startGate{w: &out}
	r := &pidReader{w: &errb, got: make(chan int32, 1), started: gate.open}
	gate.Write([]byte("early "))
	if out.Len() != 0 {
		t.Fatalf("stdout passed on before the pid: %q", out.String())
	}
	r.Write(binary.NativeEndian.AppendUint32(nil, 7))
	gate.Write([]byte("late"))
	if out.String() != "early late" || <-r.got != 7 {
		t.Fatalf("stdout %q; want %q once the pid came", out.String(), "early late")
	}

	out.Reset()
	gate = &startGate{w: &out}
	gate.Write([]byte("OCI runtime exec failed\r\n"))
	if out.Len() != 0 || gate.heldText() != "OCI runtime exec failed" {
		t.Fatalf("with no pid: stdout %q, held %q", out.String(), gate.heldText())
	}
	// More than an error message is the program's: it is passed on.
	gate.Write(make([]byte, maxGated))
	if out.Len() != len("OCI runtime exec failed\r\n")+maxGated {
		t.Fatalf("past the gate's bound: %d bytes passed on", out.Len())
	}
}

func TestUnprivileged(t *testing.T) {
	for user, want := range map[string]bool{"65534:65534": true, "1000:0": true, "0:0": false, "": false, "root": false, "65534": false, "1:x": false, "-1:1": false} {
		if got := unprivileged(user); got != want {
			t.Errorf("unprivileged(%q) = %v; want %v", user, got, want)
		}
	}
}

// The helper in the Go is what its source assembles and links to.
func TestSandboxHelperMatchesSource(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the source is x86-64; this host's assembler is for %s", runtime.GOARCH)
	}
	b, err := asm.Build(t.Context(), "testdata/sandbox_helper_amd64.S", asm.Executable)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, helperAMD64) {
		t.Fatal("sandbox_helper.go is not what testdata/sandbox_helper_amd64.S builds to; run go generate ./engine/docker/")
	}
}
