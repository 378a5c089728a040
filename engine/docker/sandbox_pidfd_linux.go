package docker

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/proc"
)

// pidWatch holds a pidfd on a sandbox's runtime process (the container's
// pid: runsc's sandbox process, or the init under runc), so that its death
// is seen at once, without asking dockerd, which learns of it later.
type pidWatch struct {
	pid int
	f   *os.File
	// done is closed once the process has exited. The wait is on Go's
	// poller, so an idle watch holds no thread.
	done chan struct{}
	once sync.Once
}

// errProcessGone is watchPid's error for a pid that no longer exists.
var errProcessGone = errors.New("no such process")

// watchPid opens a watch on pid. Once the process exits, the watch ends
// itself (end) and calls gone, if not nil.
func watchPid(pid int, gone func(*pidWatch)) (*pidWatch, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return nil, errProcessGone
	}
	if err != nil {
		return nil, err
	}
	w := &pidWatch{pid: pid, f: os.NewFile(uintptr(fd), "pidfd"), done: make(chan struct{})}
	rc, err := w.f.SyscallConn()
	if err != nil {
		w.f.Close()
		return nil, err
	}
	go func() {
		// The callback returns false to wait for readability; Close ends
		// the wait with an error.
		if rc.Read(func(fd uintptr) bool { return readable(int(fd)) }) == nil {
			w.end()
		}
		select {
		case <-w.done:
			if gone != nil {
				gone(w)
			}
		default: // closed unshared
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

// end marks the process exited and closes the pidfd. It is called only
// once the process has exited, so every handle sharing w sees the exit on
// done, never a pidfd closed under it.
func (w *pidWatch) end() {
	w.once.Do(func() {
		close(w.done)
		w.f.Close()
	})
}

// close closes a watch that no handle shares, without marking an exit.
func (w *pidWatch) close() {
	if w != nil {
		w.f.Close()
	}
}

// killTree SIGKILLs, from the host, every descendant of host process root
// (root too) that is in container cid's cgroup, until none is left or
// rounds run out. It catches children that left the exec's process group
// or session while their parent still lived. Under runc an exec's pid is a
// host process; under runsc it is the runsc exec proxy, which has no
// descendants, and this finds nothing. Each process is signalled through a
// pidfd checked to be in the container, so a reused pid is never hit.
func killTree(root int, cid string) {
	for range 20 {
		kids := map[int][]int{}
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if pp := ppidOf(pid); pp > 0 {
				kids[pp] = append(kids[pp], pid)
			}
		}
		var tree []int
		for todo := []int{root}; len(todo) > 0; {
			p := todo[len(todo)-1]
			todo = todo[:len(todo)-1]
			tree = append(tree, p)
			todo = append(todo, kids[p]...)
		}
		hit := 0
		for _, pid := range tree {
			fd, err := unix.PidfdOpen(pid, 0)
			if err != nil {
				continue
			}
			if inContainer(pid, cid) && unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil {
				hit++
			}
			unix.Close(fd)
		}
		if hit == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// ppidOf is pid's parent, zombie or not; 0 when pid is gone.
func ppidOf(pid int) int {
	st, err := proc.ReadStat(pid)
	if err != nil {
		return 0
	}
	return st.Ppid
}

// inContainer reports whether pid's cgroup path names container cid.
func inContainer(pid int, cid string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	return err == nil && namesContainer(b, cid)
}

// namesContainer reports whether a /proc/<pid>/cgroup file names a group
// of container cid's: dockerd names it <parent>/<cid> with the cgroupfs
// driver, <slice>/docker-<cid>.scope with systemd's (cgroup v2's default).
func namesContainer(procCgroup []byte, cid string) bool {
	for line := range strings.SplitSeq(string(procCgroup), "\n") {
		// "hierarchy-ID:controllers:path"; v2's is "0::path".
		f := strings.SplitN(line, ":", 3)
		if len(f) < 3 {
			continue
		}
		for _, c := range strings.Split(f[2], "/") {
			if c == cid || c == "docker-"+cid+".scope" {
				return true
			}
		}
	}
	return false
}
