package docker

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// pidWatch holds a pidfd on a sandbox's runtime process (the container's
// pid: runsc's sandbox process, or the init under runc), so that its death
// is seen at once, without asking dockerd, which learns of it later.
type pidWatch struct {
	f *os.File
	// done is closed once the process has exited. The wait is on Go's
	// poller, so an idle watch holds no thread.
	done chan struct{}
}

// errProcessGone is watchPid's error for a pid that no longer exists.
var errProcessGone = errors.New("no such process")

func watchPid(pid int) (*pidWatch, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return nil, errProcessGone
	}
	if err != nil {
		return nil, err
	}
	w := &pidWatch{f: os.NewFile(uintptr(fd), "pidfd"), done: make(chan struct{})}
	rc, err := w.f.SyscallConn()
	if err != nil {
		w.f.Close()
		return nil, err
	}
	go func() {
		// The callback returns false to wait for readability; Close ends
		// the wait with an error.
		if rc.Read(func(fd uintptr) bool { return readable(int(fd)) }) == nil {
			close(w.done)
		}
	}()
	return w, nil
}

// readable polls fd without waiting; a pidfd is readable once its process
// has exited.
func readable(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

// exited reports whether the process has ended.
func (w *pidWatch) exited() bool {
	if w == nil {
		return false
	}
	select {
	case <-w.done:
		return true
	default:
	}
	rc, err := w.f.SyscallConn()
	if err != nil {
		return false
	}
	var r bool
	rc.Control(func(fd uintptr) { r = readable(int(fd)) })
	return r
}

// ended is closed once the process has exited; never, for no watch.
func (w *pidWatch) ended() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.done
}

func (w *pidWatch) close() {
	if w != nil {
		w.f.Close()
	}
}
