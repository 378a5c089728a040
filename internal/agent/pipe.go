package agent

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// ErrEmpty is ReadNow's answer for a pipe that holds nothing now.
var ErrEmpty = errors.New("the pipe holds nothing now")

// ReadNow reads what f, a pipe opened non-blocking (as os.Pipe's are),
// holds now, without waiting for more and whatever f's read deadline:
// io.EOF at its end, ErrEmpty when it holds nothing.
func ReadNow(f *os.File, b []byte) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	if err := rc.Control(func(fd uintptr) {
		for {
			n, rerr = syscall.Read(int(fd), b)
			if rerr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return 0, err
	}
	switch {
	case rerr == syscall.EAGAIN:
		return 0, ErrEmpty
	case rerr != nil:
		return 0, rerr
	case n == 0 && len(b) > 0:
		return 0, io.EOF
	}
	return n, nil
}
