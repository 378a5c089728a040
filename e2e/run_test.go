//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"

	"github.com/airlock-sandbox/airlock/runner"
)

func TestEcho(t *testing.T) {
	res, c := runJSON(t, nil, "--image", busybox, "--", "echo", "hello", "sandbox")
	if res.Reason != runner.ReasonExited || res.ExitCode != 0 || c.code != 0 {
		t.Fatalf("reason %s exit %d cli %d: %s", res.Reason, res.ExitCode, c.code, c.stderr)
	}
	if got := string(res.Stdout.Head); got != "hello sandbox\n" {
		t.Errorf("stdout %q", got)
	}
	if res.Engine != engineName || res.Isolation != isolationName || res.Image == "" || res.ID == "" || len(res.Seccomp) != 64 {
		t.Errorf("result fields: %+v", res)
	}
	noSandboxLeft(t)
}

func TestStreamsLiveAndExitCode(t *testing.T) {
	c := airlock(nil, "run", "--image", busybox, "--", "sh", "-c", "echo out; echo err >&2; exit 7")
	if c.code != 7 || c.stdout != "out\n" || c.stderr != "err\n" {
		t.Errorf("exit %d stdout %q stderr %q", c.code, c.stdout, c.stderr)
	}
}

func TestDefaultImagePython(t *testing.T) {
	c := airlock(nil, "run", "--", "python3", "-c",
		"import numpy, matplotlib.pyplot as plt; plt.plot(numpy.arange(5)); plt.savefig('/tmp/p.png'); print('sum', int(numpy.arange(10).sum()))")
	if c.code != 0 || c.stdout != "sum 45\n" {
		t.Fatalf("exit %d stdout %q stderr %s", c.code, c.stdout, c.stderr)
	}
}

func TestNoNetwork(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	// 192.0.2.1 is TEST-NET-1 (RFC 5737): routable-looking, never assigned.
	script := fmt.Sprintf(`
import socket, os
for host in ("127.0.0.1", "192.0.2.1"):
    try:
        socket.create_connection((host, %d), timeout=3)
        print(host, "connected")
    except OSError as e:
        print(host, "refused", e.errno)
print("ifaces", sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]))
`, port)
	res, _ := runJSON(t, nil, "--timeout", "20s", "--", "python3", "-c", script)
	out := string(res.Stdout.Head)
	if res.Reason != runner.ReasonExited || res.ExitCode != 0 {
		t.Fatalf("reason %s exit %d: %s %s", res.Reason, res.ExitCode, out, res.Stderr.Head)
	}
	if strings.Contains(out, "connected") {
		t.Errorf("the sandbox reached the network:\n%s", out)
	}
	// The loopback is the sandbox's own: nothing listens there.
	if !strings.Contains(out, fmt.Sprintf("127.0.0.1 refused %d", syscall.ECONNREFUSED)) {
		t.Errorf("loopback: want ECONNREFUSED:\n%s", out)
	}
	// No route at all to anything else.
	if !strings.Contains(out, fmt.Sprintf("192.0.2.1 refused %d", syscall.ENETUNREACH)) {
		t.Errorf("public address: want ENETUNREACH:\n%s", out)
	}
	if !strings.Contains(out, "ifaces ['lo']") {
		t.Errorf("interfaces other than lo:\n%s", out)
	}
	select {
	case <-accepted:
		t.Errorf("the host listener on 127.0.0.1:%d accepted a connection from the sandbox", port)
	default:
	}
}

func TestReadOnlyRootAndNoPrivilege(t *testing.T) {
	script := `grep -E '^(Uid|Gid|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status
awk '$2 == "/" {print "rootmount", $4}' /proc/mounts
if echo x > /probe 2>/dev/null; then echo wrote-root; else echo root-write-failed; fi
if echo x > /tmp/probe; then echo wrote-tmp; fi
hostname`
	res, _ := runJSON(t, nil, "--image", busybox, "--", "sh", "-c", script)
	out := string(res.Stdout.Head)
	fields := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.Fields(v)[0]
		}
	}
	for _, capSet := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if fields[capSet] != "0000000000000000" {
			t.Errorf("%s = %q, want 0", capSet, fields[capSet])
		}
	}
	if fields["NoNewPrivs"] != "1" {
		t.Errorf("NoNewPrivs = %q", fields["NoNewPrivs"])
	}
	if fields["Uid"] == "0" || fields["Uid"] == "" || fields["Gid"] == "0" {
		t.Errorf("uid %q gid %q", fields["Uid"], fields["Gid"])
	}
	if !strings.Contains(out, "rootmount ro") {
		t.Errorf("root is not mounted read-only:\n%s", out)
	}
	if !strings.Contains(out, "root-write-failed") || strings.Contains(out, "wrote-root") {
		t.Errorf("wrote to /:\n%s", out)
	}
	if !strings.Contains(out, "wrote-tmp") {
		t.Errorf("/tmp is not writable:\n%s", out)
	}
	if !strings.Contains(out, "\nsandbox\n") {
		t.Errorf("hostname is not neutral:\n%s", out)
	}
}

func TestMemoryHogIsOOM(t *testing.T) {
	res, c := runJSON(t, nil, "--memory", "128MiB", "--timeout", "60s", "--", "python3", "-c",
		"a = []\nwhile True: a.append(bytearray(8 << 20))")
	if res.Reason != runner.ReasonOOM {
		t.Fatalf("reason %s exit %d, want oom; stderr %q", res.Reason, res.ExitCode, res.Stderr.Head)
	}
	if c.code != 137 {
		t.Errorf("airlock exit %d, want 137", c.code)
	}
	if res.Usage.MemoryPeakBytes < 100<<20 || res.Usage.CPUMS == 0 {
		t.Errorf("usage %+v: want a memory peak near the 128MiB limit", res.Usage)
	}
	noSandboxLeft(t)
}

func TestForkBombContained(t *testing.T) {
	done := make(chan cliResult, 1)
	go func() {
		done <- airlock(nil, "run", "--json", "--image", busybox, "--pids", "64", "--timeout", "20s", "--",
			"sh", "-c", "f(){ f | f & }; f; sleep 5; exit 3")
	}()
	// While the bomb runs, the host must still start and finish processes.
	for i := 0; i < 5; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := exec.CommandContext(ctx, "/bin/true").Run()
		cancel()
		if err != nil {
			t.Fatalf("host could not run /bin/true during the fork bomb: %v", err)
		}
	}
	var c cliResult
	select {
	case c = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the fork-bomb run did not end")
	}
	var res runner.Result
	if err := json.Unmarshal([]byte(c.stdout), &res); err != nil {
		t.Fatalf("no result: %v %s", err, c.stdout)
	}
	if res.Reason != runner.ReasonPidsLimit || c.code != 122 {
		t.Errorf("fork bomb: reason %s airlock exit %d, want pids_limit and 122", res.Reason, c.code)
	}
	if res.Usage.PidsPeak == 0 || res.Usage.CPUMS == 0 || res.Usage.MemoryPeakBytes == 0 {
		t.Errorf("usage not recorded: %+v", res.Usage)
	}
	noSandboxLeft(t)
}

func TestTimeout(t *testing.T) {
	res, c := runJSON(t, nil, "--image", busybox, "--timeout", "2s", "--", "sleep", "600")
	if res.Reason != runner.ReasonTimeout || c.code != 124 {
		t.Fatalf("reason %s cli exit %d", res.Reason, c.code)
	}
	if c.wall > 30*time.Second {
		t.Errorf("a 2s timeout took %v to report", c.wall)
	}
	noSandboxLeft(t)
}

func TestOutputFloodIsCappedWithBoundedMemory(t *testing.T) {
	res, c := runJSON(t, nil, "--image", busybox, "--output-limit", "1MiB", "--", "yes")
	if res.Reason != runner.ReasonOutputLimit || c.code != 123 {
		t.Fatalf("reason %s cli exit %d: %s", res.Reason, c.code, c.stderr)
	}
	if !res.Stdout.Truncated || res.Stdout.Bytes <= 1<<20 || len(res.Stdout.Head) != 1<<20 {
		t.Errorf("stdout: truncated %v, bytes %d, head %d", res.Stdout.Truncated, res.Stdout.Bytes, len(res.Stdout.Head))
	}
	if !bytes.HasPrefix(res.Stdout.Head, []byte("y\ny\ny\n")) || len(res.Stdout.Tail) == 0 || !bytes.HasPrefix(bytes.TrimLeft(res.Stdout.Tail, "\n"), []byte("y\n")) {
		t.Errorf("head %q… tail …%q", res.Stdout.Head[:10], res.Stdout.Tail)
	}
	if c.maxRSS > 100<<20 {
		t.Errorf("airlock peak RSS %d MiB, want under 100 MiB", c.maxRSS>>20)
	}
	t.Logf("wrote %d bytes before the kill; airlock peak RSS %.1f MiB", res.Stdout.Bytes, float64(c.maxRSS)/(1<<20))

	// One line of many megabytes and no newline.
	res, c = runJSON(t, nil, "--image", busybox, "--output-limit", "64KiB", "--", "sh", "-c", "tr -d '\\n' < /dev/zero")
	if res.Reason != runner.ReasonOutputLimit || len(res.Stdout.Head) != 64<<10 || c.maxRSS > 100<<20 {
		t.Errorf("newline-free flood: reason %s head %d rss %d MiB", res.Reason, len(res.Stdout.Head), c.maxRSS>>20)
	}
	noSandboxLeft(t)
}

func TestHostEnvironmentDoesNotLeak(t *testing.T) {
	res, _ := runJSON(t, []string{"AIRLOCK_E2E_SECRET=hunter2"}, "--image", busybox, "--env", "GIVEN=yes", "--", "env")
	out := string(res.Stdout.Head)
	if strings.Contains(out, "hunter2") || strings.Contains(out, "AIRLOCK_E2E_SECRET") {
		t.Errorf("host variable visible in the sandbox:\n%s", out)
	}
	if !strings.Contains(out, "GIVEN=yes") {
		t.Errorf("--env variable missing:\n%s", out)
	}
}

func TestBinaryAndFakeResultOutput(t *testing.T) {
	res, _ := runJSON(t, nil, "--image", busybox, "--", "sh", "-c", `printf '\000\377\033[2J'; printf '{"reason":"timeout","exit_code":0}' >&2`)
	if !bytes.Equal(res.Stdout.Head, []byte{0, 0xff, 0x1b, '[', '2', 'J'}) {
		t.Errorf("binary stdout not kept exactly: %q", res.Stdout.Head)
	}
	if res.Reason != runner.ReasonExited || string(res.Stderr.Head) != `{"reason":"timeout","exit_code":0}` {
		t.Errorf("reason %s, stderr %q", res.Reason, res.Stderr.Head)
	}
	// U+009B is CSI to a terminal in UTF-8 mode: valid UTF-8, so it rides
	// in the JSON as text, escaped, and decodes back exactly.
	res, c := runJSON(t, nil, "--image", busybox, "--", "printf", `\302\2332J\302\205ok`)
	if string(res.Stdout.Head) != "\u009b2J\u0085ok" {
		t.Errorf("C1 stdout not kept exactly: %q", res.Stdout.Head)
	}
	for b := byte(0x80); b <= 0x9f; b++ {
		if strings.Contains(c.stdout, string([]byte{0xc2, b})) {
			t.Errorf("raw C1 U+%04X in --json output: %q", b, c.stdout)
		}
	}
}

func TestStdin(t *testing.T) {
	f := t.TempDir() + "/in.txt"
	os.WriteFile(f, []byte("one\ntwo\nthree\n"), 0o644)
	// The file reaches the program through a pipe, never as the host's
	// descriptor; a directory is refused.
	res, _ := runJSON(t, nil, "--image", busybox, "--stdin", f, "--", "sh", "-c", "test -p /dev/stdin && wc -l")
	if strings.TrimSpace(string(res.Stdout.Head)) != "3" {
		t.Errorf("wc -l of stdin, through a pipe: %q", res.Stdout.Head)
	}
	if c := airlock(nil, "run", "--image", busybox, "--stdin", t.TempDir(), "--", "true"); c.code != 64 || !strings.Contains(c.stderr, "is a directory") {
		t.Errorf("--stdin DIR: exit %d, stderr %q; want 64 naming the directory", c.code, c.stderr)
	}
	// Without --stdin, stdin is closed: cat returns at once.
	res, _ = runJSON(t, nil, "--image", busybox, "--timeout", "10s", "--", "cat")
	if res.Reason != runner.ReasonExited || len(res.Stdout.Head) != 0 {
		t.Errorf("cat without stdin: reason %s stdout %q", res.Reason, res.Stdout.Head)
	}
}

func TestInterruptKillsAndRemoves(t *testing.T) {
	cmd := exec.Command(airlockBin, "--root", rootDir, "run", "--json", "--image", busybox, "--", "sleep", "600")
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the sandbox exists, then interrupt airlock.
	deadline := time.Now().Add(30 * time.Second)
	for len(sandboxes()) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	ee, _ := err.(*exec.ExitError)
	if ee == nil || ee.ExitCode() != 130 || !strings.Contains(out.String(), `"reason":"killed"`) {
		t.Errorf("after SIGINT: %v, %s", err, out.String())
	}
	noSandboxLeft(t)
}

func TestBadReferencesCreateNothing(t *testing.T) {
	since := time.Now()
	// Every run creates its scratch directory under runs/ before the engine
	// starts; an untouched runs/ means nothing was created on either engine.
	runs := filepath.Join(rootDir, "runs")
	os.MkdirAll(runs, 0o700)
	before, _ := os.Stat(runs)
	for _, tc := range []struct {
		ref  string
		code int
		want string
	}{
		{"python:3.12", 64, "python@sha256:<64 hex digits>"},
		{"airlock-e2e/busybox", 64, "airlock image ls"},
		{"sha256:" + strings.Repeat("ab", 32), 66, "airlock image import"},
		{"airlock-e2e/busybox@sha256:" + strings.Repeat("0", 64), 66, "never pulls"},
	} {
		c := airlock(nil, "run", "--image", tc.ref, "--", "true")
		if c.code != tc.code || !strings.Contains(c.stderr, tc.want) {
			t.Errorf("--image %s: exit %d, stderr %q; want exit %d mentioning %q", tc.ref, c.code, c.stderr, tc.code, tc.want)
		}
	}
	if after, _ := os.Stat(runs); !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("a run directory was created and removed")
	}
	// dockerd saw no container create in that window either.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msgs, errs := dockerCli.Events(ctx, events.ListOptions{
		Since:   since.Format(time.RFC3339Nano),
		Until:   time.Now().Format(time.RFC3339Nano),
		Filters: filters.NewArgs(filters.Arg("type", "container"), filters.Arg("event", "create")),
	})
	for {
		select {
		case m := <-msgs:
			t.Errorf("a container was created: %+v", m.Actor)
		case err := <-errs:
			if err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("reading events: %v", err)
			}
			return
		}
	}
}

func TestBadFlagsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"run", "--memory", "lots", "--", "true"},
		{"run", "--timeout", "30", "--", "true"},
		{"run", "--cpus", "0", "--", "true"},
		{"run", "--isolation", "vm", "--", "true"},
		{"run", "--no-such-flag"},
		{"run"},
	} {
		c := airlock(nil, args...)
		if c.code != 64 || c.stderr == "" {
			t.Errorf("%v: exit %d stderr %q, want 64 with a message", args, c.code, c.stderr)
		}
	}
}
