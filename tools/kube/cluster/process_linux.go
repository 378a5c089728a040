package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// start starts bin detached from the caller (its own session, stdin from
// /dev/null, output appended to its log) in the run directory, and records
// its pid.
func start(l Layout, name, bin string, args, env []string) (int, error) {
	logFile, err := os.OpenFile(l.Log(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, args...)
	cmd.Dir = l.Run()
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting %s: %w", name, err)
	}
	pid := cmd.Process.Pid
	if err := writeFile0600(l.PidFile(name), []byte(strconv.Itoa(pid)+"\n")); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return 0, fmt.Errorf("recording %s's pid: %w", name, err)
	}
	// Reap it if it exits while this process still runs, so that a quick
	// death shows as not alive rather than as a zombie.
	go func() { _ = cmd.Wait() }()
	return pid, nil
}

// readPid returns the pid recorded for name, or 0 if none is.
func readPid(l Layout, name string) (int, error) {
	b, err := os.ReadFile(l.PidFile(name))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("%s holds no pid: %q", l.PidFile(name), b)
	}
	return pid, nil
}

// ours reports whether pid is alive (not a zombie) and runs a binary from
// under binDir: a pid that was reused by another program is not ours.
func ours(pid int, binDir string) bool {
	if !alive(pid) {
		return false
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return false
	}
	exe = strings.TrimSuffix(exe, " (deleted)")
	// /proc shows the resolved path; so must binDir be.
	if real, err := filepath.EvalSymlinks(binDir); err == nil {
		binDir = real
	}
	rel, err := filepath.Rel(binDir, exe)
	return err == nil && !strings.HasPrefix(rel, "..")
}

// alive reports whether pid exists and has not exited; an exited child that
// was not reaped yet (state Z or X) is not alive.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may
	// itself hold any byte.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	state := s[i+2]
	return state != 'Z' && state != 'X'
}

// stop sends SIGTERM to pid and waits for it to end, then SIGKILL.
func stop(pid int, grace time.Duration) error {
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	if waitGone(pid, grace) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	if waitGone(pid, 10*time.Second) {
		return nil
	}
	return fmt.Errorf("pid %d did not end after SIGKILL", pid)
}

func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if !alive(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ErrBusy is returned by Lock while another kube command holds the lock.
var ErrBusy = errors.New("another kube up, down or clean is running")

// Lock takes the lock that up, down and clean hold while they run, so that
// two of them never start or stop the same control plane at once. The lock
// file lives in bin/, which down keeps.
func Lock(l Layout) (unlock func(), err error) {
	if err := os.MkdirAll(l.Bin(), 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(l.Bin(), ".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s is locked)", ErrBusy, path)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
