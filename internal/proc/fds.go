package proc

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// CloseInherited closes the descriptors above stderr that this process
// inherited from whoever started it: those without close-on-exec, which
// Go never opens. A process that outlives its starter (a sandbox's
// supervisor, a daemon started by a test) must not keep what the starter
// held, such as a lock that `flock LOCK cmd` waits on.
func CloseInherited() error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue // gone meanwhile (the directory's own), or Go's
		}
		unix.Close(fd)
	}
	return nil
}
