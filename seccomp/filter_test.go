//go:build linux && cgo

package seccomp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// helperEnv makes the test binary a helper process instead: "filtered"
// loads the default profile, "unfiltered" does not, and "custom" loads the
// profile in the file profileEnv names if ParseCustom takes it.
const (
	helperEnv  = "AIRLOCK_SECCOMP_HELPER"
	profileEnv = "AIRLOCK_SECCOMP_HELPER_PROFILE"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

// Flags the x/sys/unix package does not name.
const (
	addrNoRandomize = 0x0040000
	readImpliesExec = 0x0400000
	kcmpFile        = 0
	qGetInfo        = 0x80000500 // QCMD(Q_GETINFO, USRQUOTA)
	kexecBadFlags   = 0xdead0000
)

// probe is a call the default profile denies. Every call is harmless
// without the filter too, even as root: bad paths, NULL pointers, invalid
// magic numbers, or a resource that is closed at once. Without the filter,
// most return something other than EPERM, which proves the filter.
type probe struct {
	name string
	want unix.Errno
	call func() unix.Errno
}

func probes() []probe {
	eperm := func(name string, call func() unix.Errno) probe { return probe{name, unix.EPERM, call} }
	const nowhere = "/nonexistent/airlock-seccomp-probe"
	return []probe{
		eperm("unshare(CLONE_NEWUSER)", func() unix.Errno { return errnoOf(unix.Unshare(unix.CLONE_NEWUSER)) }),
		eperm("setns", func() unix.Errno { return errnoOf(unix.Setns(-1, 0)) }),
		eperm("mount", func() unix.Errno { return errnoOf(unix.Mount("none", nowhere, "tmpfs", 0, "")) }),
		eperm("umount2", func() unix.Errno { return errnoOf(unix.Unmount(nowhere, 0)) }),
		eperm("pivot_root", func() unix.Errno { return errnoOf(unix.PivotRoot(nowhere, nowhere)) }),
		eperm("chroot", func() unix.Errno { return errnoOf(unix.Chroot(nowhere)) }),
		eperm("fsopen", func() unix.Errno { return closing(unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)) }),
		eperm("bpf", func() unix.Errno { return raw(unix.SYS_BPF, 0, 0, 0) }),
		eperm("perf_event_open", func() unix.Errno { return raw(unix.SYS_PERF_EVENT_OPEN, 0, 0, neg(1), neg(1), 0) }),
		eperm("userfaultfd", func() unix.Errno { return rawFD(unix.SYS_USERFAULTFD, unix.O_CLOEXEC) }),
		eperm("io_uring_setup", func() unix.Errno { return raw(unix.SYS_IO_URING_SETUP, 1, 0) }),
		eperm("keyctl", func() unix.Errno { return raw(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, neg(3), 0) }),
		eperm("add_key", func() unix.Errno { return raw(unix.SYS_ADD_KEY, 0, 0, 0, 0, neg(3)) }),
		eperm("init_module", func() unix.Errno { return errnoOf(unix.InitModule(nil, "")) }),
		eperm("kexec_load", func() unix.Errno { return raw(unix.SYS_KEXEC_LOAD, 0, 17, 0, kexecBadFlags) }),
		// The magic numbers are wrong on purpose: never call unix.Reboot here.
		eperm("reboot", func() unix.Errno { return raw(unix.SYS_REBOOT, 0, 0, 0, 0) }),
		eperm("swapon", func() unix.Errno { return raw(unix.SYS_SWAPON, 0, 0) }),
		eperm("open_by_handle_at", func() unix.Errno { return raw(unix.SYS_OPEN_BY_HANDLE_AT, neg(1), 0, 0) }),
		eperm("clock_settime", func() unix.Errno { return raw(unix.SYS_CLOCK_SETTIME, unix.CLOCK_REALTIME, 0) }),
		eperm("acct", func() unix.Errno { return errnoOf(unix.Acct(nowhere)) }),
		eperm("quotactl", func() unix.Errno { return raw(unix.SYS_QUOTACTL, qGetInfo, 0, 0, 0) }),
		eperm("kcmp", func() unix.Errno {
			pid := uintptr(os.Getpid())
			return raw(unix.SYS_KCMP, pid, pid, kcmpFile, 0, 0)
		}),
		eperm("pidfd_getfd", func() unix.Errno { return raw(unix.SYS_PIDFD_GETFD, neg(1), 0, 0) }),
		eperm("socket(AF_PACKET)", func() unix.Errno { return closing(unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)) }),
		eperm("socket(AF_NETLINK)", func() unix.Errno {
			return closing(unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE))
		}),
		eperm("socket(AF_VSOCK)", func() unix.Errno { return closing(unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)) }),
		eperm("clone(CLONE_NEWNET)", func() unix.Errno { return forkExec(unix.CLONE_NEWNET) }),
		eperm("clone(CLONE_NEWUSER)", func() unix.Errno { return forkExec(unix.CLONE_NEWUSER) }),
		eperm("ioctl(TIOCSTI)", func() unix.Errno { return ioctlDevNull(unix.TIOCSTI) }),
		eperm("ioctl(TIOCSTI|1<<32)", func() unix.Errno { return ioctlDevNull(1<<32 | unix.TIOCSTI) }),
		eperm("personality(READ_IMPLIES_EXEC)", func() unix.Errno { return raw(unix.SYS_PERSONALITY, readImpliesExec) }),
		eperm("personality(ADDR_NO_RANDOMIZE)", func() unix.Errno { return raw(unix.SYS_PERSONALITY, addrNoRandomize) }),
		{"clone3", unix.ENOSYS, func() unix.Errno { return raw(unix.SYS_CLONE3, 0, 0) }},
		// Last: without the filter it makes the test process this one's
		// tracer, and nothing may run after it.
		eperm("ptrace(PTRACE_TRACEME)", func() unix.Errno { return raw(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0, 0) }),
	}
}

// olderThread is the probe run on a thread that existed before the filter
// was loaded: TSYNC must have covered it.
const olderThread = "socket(AF_NETLINK) on an older thread"

func raw(trap uintptr, args ...uintptr) unix.Errno {
	var a [6]uintptr
	copy(a[:], args)
	_, _, e := unix.Syscall6(trap, a[0], a[1], a[2], a[3], a[4], a[5])
	return e
}

// rawFD is raw for a call that returns a descriptor, which it closes.
func rawFD(trap uintptr, args ...uintptr) unix.Errno {
	var a [6]uintptr
	copy(a[:], args)
	fd, _, e := unix.Syscall6(trap, a[0], a[1], a[2], a[3], a[4], a[5])
	if e == 0 {
		unix.Close(int(fd))
	}
	return e
}

func closing(fd int, err error) unix.Errno {
	if err == nil {
		unix.Close(fd)
	}
	return errnoOf(err)
}

func errnoOf(err error) unix.Errno {
	var e unix.Errno
	if err == nil || !errors.As(err, &e) {
		return 0
	}
	return e
}

// neg is -n as a syscall argument.
func neg(n uintptr) uintptr { return -n }

func ioctlDevNull(req uintptr) unix.Errno {
	fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return errnoOf(err)
	}
	defer unix.Close(fd)
	return raw(unix.SYS_IOCTL, uintptr(fd), req, 0)
}

// forkExec asks for new namespaces the way a Go program would: ForkExec's
// clone with the flags.
func forkExec(flags uintptr) unix.Errno {
	pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{
		Sys: &syscall.SysProcAttr{Cloneflags: flags},
	})
	if err != nil {
		return errnoOf(err)
	}
	var ws unix.WaitStatus
	unix.Wait4(pid, &ws, 0, nil)
	return 0
}

// helper runs the probes, then, when filtered and every probe was denied,
// a workload that must still work. It prints "name errno" lines and "ok".
func helper(mode string) int {
	runtime.LockOSThread()
	older := olderThreadProbe()
	if mode != "unfiltered" {
		var p *Profile
		var err error
		if mode == "custom" {
			b, rerr := os.ReadFile(os.Getenv(profileEnv))
			if rerr != nil {
				fmt.Println("setup:", rerr)
				return 2
			}
			if p, err = ParseCustom(b); err != nil {
				fmt.Println("refused:", err)
				return 0
			}
		} else if p, err = Load("default"); err != nil {
			fmt.Println("setup:", err)
			return 2
		}
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			fmt.Println("setup: no_new_privs:", err)
			return 2
		}
		f, err := Compile(p)
		if err != nil {
			fmt.Println("setup:", err)
			return 2
		}
		if err := f.Load(); err != nil {
			fmt.Println("setup:", err)
			return 2
		}
		f.Release()
	}
	fmt.Printf("%s %d\n", olderThread, older())
	succeeded := false
	for _, p := range probes() {
		e := p.call()
		fmt.Printf("%s %d\n", p.name, e)
		succeeded = succeeded || e == 0
	}
	if mode != "filtered" {
		return 0
	}
	if succeeded {
		fmt.Println("workload skipped: a denied call succeeded")
		return 1
	}
	if err := workload(); err != nil {
		fmt.Println("workload:", err)
		return 1
	}
	fmt.Println("ok")
	return 0
}

// olderThreadProbe starts a thread now and returns a function that runs
// the probe on it later.
func olderThreadProbe() func() unix.Errno {
	run := make(chan struct{})
	result := make(chan unix.Errno)
	started := make(chan struct{})
	go func() {
		runtime.LockOSThread() // this thread, not a new one, makes the call
		close(started)
		<-run
		result <- closing(unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE))
	}()
	<-started
	return func() unix.Errno {
		close(run)
		return <-result
	}
}

// workload is what a program needs and the profile must allow.
func workload() error {
	steps := []struct {
		name string
		run  func() error
	}{
		{"temp file", tempFile},
		{"exec /bin/true", func() error { return exec.Command("/bin/true").Run() }},
		{"threads", threads},
		{"socketpair(AF_UNIX)", socketPair},
		{"tcp on loopback", loopback},
		{"sleep", func() error { time.Sleep(10 * time.Millisecond); return nil }},
		{"getrandom", func() error { _, err := unix.Getrandom(make([]byte, 16), 0); return err }},
		{"ioctl(TCGETS) on /dev/null", func() error {
			if e := ioctlDevNull(unix.TCGETS); e != unix.ENOTTY {
				return fmt.Errorf("got errno %d, want ENOTTY from the kernel", e)
			}
			return nil
		}},
		{"personality query", func() error { return errnoOrNil(raw(unix.SYS_PERSONALITY, 0xffffffff)) }},
	}
	for _, s := range steps {
		if err := s.run(); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

func errnoOrNil(e unix.Errno) error {
	if e != 0 {
		return e
	}
	return nil
}

func tempFile() error {
	f, err := os.CreateTemp("", "airlock-seccomp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.WriteString("hello"); err != nil {
		return err
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return err
	}
	if string(b) != "hello" {
		return fmt.Errorf("read back %q", b)
	}
	return nil
}

// threads runs goroutines on threads of their own; each exits with its
// goroutine, since none unlocks.
func threads() error {
	var wg sync.WaitGroup
	sums := make([]int, 4)
	for i := range sums {
		wg.Go(func() {
			runtime.LockOSThread()
			for j := range 100000 {
				sums[i] += j
			}
		})
	}
	wg.Wait()
	for _, s := range sums {
		if s != 4999950000 {
			return fmt.Errorf("sum %d", s)
		}
	}
	return nil
}

func socketPair() error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	if _, err := unix.Write(fds[0], []byte("x")); err != nil {
		return err
	}
	b := make([]byte, 1)
	if _, err := unix.Read(fds[1], b); err != nil {
		return err
	}
	return nil
}

func loopback() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	if string(b) != "ping" {
		return fmt.Errorf("echo %q", b)
	}
	return nil
}

// runHelper runs this test binary as a helper and returns its "name errno"
// lines and its whole output. env is added to the helper's environment.
func runHelper(t *testing.T, mode string, env ...string) (map[string]unix.Errno, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	// No asynchronous preemption: a traced helper (PTRACE_TRACEME without
	// the filter) would stop at its SIGURG, with nobody to resume it.
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "GODEBUG=asyncpreemptoff=1")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s helper: %v\n%s", mode, err, out)
	}
	got := map[string]unix.Errno{}
	for line := range strings.Lines(string(out)) {
		line = strings.TrimSpace(line)
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if e, err := strconv.Atoi(line[i+1:]); err == nil {
			got[line[:i]] = unix.Errno(e)
		}
	}
	return got, string(out)
}

// TestDefaultDeniesEscapes loads the default profile into a child process,
// attempts each denied call, then runs an ordinary workload under it.
func TestDefaultDeniesEscapes(t *testing.T) {
	got, out := runHelper(t, "filtered")
	if !strings.Contains(out, "\nok\n") {
		t.Errorf("the workload failed under the filter:\n%s", out)
	}
	want := map[string]unix.Errno{olderThread: unix.EPERM}
	for _, p := range probes() {
		want[p.name] = p.want
	}
	for name, w := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("%s: no result", name)
		} else if g != w {
			t.Errorf("%s: errno %d (%v), want %d (%v)", name, g, g, w, w)
		}
	}

	// Without the filter, the same calls must mostly get something else,
	// or the EPERMs above prove nothing. Only root can show it.
	if os.Geteuid() != 0 {
		t.Log("not root: skipping the unfiltered run")
		return
	}
	control, _ := runHelper(t, "unfiltered")
	proved := 0
	for name, w := range want {
		if control[name] == w {
			t.Logf("%s: errno %d without the filter too; it proves nothing on this host", name, w)
			continue
		}
		proved++
	}
	if proved == 0 {
		t.Errorf("as root, every call failed the same way without the filter:\n%v", control)
	}
	t.Logf("%d of %d denials differ from the unfiltered run", proved, len(want))
}

// TestCustomMaskTricksRefused: the review's profile, the default with a
// clone mask of 0 and socket masks that leave out a high bit of the value,
// is refused before it is compiled. libseccomp compiles those rules to
// match clone(CLONE_NEWUSER) and socket(AF_NETLINK, AF_VSOCK); were the
// profile taken, the helper would load it and the probes would show it.
func TestCustomMaskTricksRefused(t *testing.T) {
	doc := defaultDoc(t)
	replace(t, doc, "clone", `{"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 0, "valueTwo": 1, "op": "SCMP_CMP_MASKED_EQ"}]}`)
	editReviewSockets(t, doc)
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "profile.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, out := runHelper(t, "custom", profileEnv+"="+file)
	if strings.Contains(out, "refused: "+ErrInvalid.Error()) {
		t.Log(out)
		return
	}
	for name, e := range got {
		if e == 0 {
			t.Errorf("%s succeeded under the custom profile", name)
		}
	}
	t.Fatalf("the custom profile was taken:\n%s", out)
}
