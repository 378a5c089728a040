package agent

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// ErrEmpty is ReadNow's answer for a pipe that holds nothing now.
var ErrEmpty = errors.New("the pipe holds nothing now")

// ErrStopped is SendHeld's answer when room or emit stopped it.
var ErrStopped = errors.New("stopped")

// MaxDrain bounds what one SendHeld passes on: more than any pipe holds,
// so that a writer that goes on writing cannot keep a drain from its end.
const MaxDrain = 16 << 20

// SendHeld passes what r, a non-blocking pipe, holds now to emit, in
// chunks of at most room() bytes of buf, without waiting for more and
// whatever r's read deadline: a drain. It returns nil once r holds
// nothing more (or MaxDrain bytes were passed on), ErrStopped when room
// gave 0 or emit failed, and the read's error (io.EOF at r's end).
func SendHeld(r *os.File, buf []byte, room func() int, emit func([]byte) error) error {
	for sent := 0; sent < MaxDrain; {
		max := min(room(), len(buf))
		if max == 0 {
			return ErrStopped
		}
		n, err := ReadNow(r, buf[:max])
		if n > 0 {
			if emit(buf[:n]) != nil {
				return ErrStopped
			}
			sent += n
		}
		switch {
		case err == ErrEmpty:
			return nil
		case err != nil:
			return err
		}
	}
	return nil
}

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
