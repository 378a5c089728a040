package egress

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// splice moves src's bytes to dst in the kernel, through a pipe, when
// both are TCP connections; handled is false, and nothing was read, when
// they are not or the pipe could not be made.
//
// Each move asks src how many bytes it has waiting (SIOCINQ), takes that
// many from the budget (at most a pipe's worth, and at most what limit
// leaves), splices at most those into the pipe, gives back what did not
// move, and then splices the pipe out to dst. The budget is never
// charged ahead of bytes that are not there, so another connection of
// the sandbox is not refused for bytes this one holds but has not
// received. With src's bytes waiting and no budget left, the move is cut
// with errByteLimit, as meterConn.Read would; at src's end it returns
// nil; a failed write to dst is a *writeError. Every move resets the
// idle timer; count gets the bytes written to dst, and at a failed write
// those the pipe still held.
func (m *meterConn) splice(dst, src net.Conn, count *atomic.Int64, limit int64) (handled bool, err error) {
	s, ok1 := src.(*net.TCPConn)
	d, ok2 := dst.(*net.TCPConn)
	if !ok1 || !ok2 {
		return false, nil
	}
	rs, err := s.SyscallConn()
	if err != nil {
		return false, nil
	}
	rd, err := d.SyscallConn()
	if err != nil {
		return false, nil
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return false, nil
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	size := pipeSize
	if got, err := unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, pipeSize); err != nil || got < size {
		// A smaller pipe (the system's pipe-max-size or the user's
		// pipe quota): each move takes less.
		if got, err = unix.FcntlInt(uintptr(p[1]), unix.F_GETPIPE_SZ, 0); err != nil {
			return false, nil
		}
		size = got
	}
	for limit != 0 {
		want := size
		if limit > 0 && int64(want) > limit {
			want = int(limit)
		}
		n, capped, eof, err := m.fill(rs, p[1], want)
		if err != nil {
			return true, err
		}
		if eof {
			return true, nil
		}
		if n > 0 {
			m.idle.touch()
		}
		for left := n; left > 0; {
			w, err := drain(rd, p[0], left)
			if w > 0 {
				left -= w
				count.Add(int64(w))
				m.idle.touch()
			}
			if err != nil {
				// What the pipe still holds was taken from src and
				// paid for: it counts, so the Records add up to the
				// budget spent.
				count.Add(int64(left))
				return true, &writeError{err}
			}
		}
		if limit > 0 {
			limit -= int64(n)
		}
		if capped {
			m.capped.Store(true)
			return true, errByteLimit
		}
	}
	return true, nil
}

// fill splices at most want of src's waiting bytes into the pipe's
// write end w, once src has some, taking them from the budget first.
// capped says the budget could not take all that was waiting: the n
// bytes moved are the last the sandbox may pass.
func (m *meterConn) fill(rs syscall.RawConn, w int, want int) (n int, capped, eof bool, err error) {
	var serr error
	err = rs.Read(func(fd uintptr) bool {
		for {
			n, capped, eof, serr = 0, false, false, nil
			avail, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ)
			if err != nil {
				serr = err
				return true
			}
			if avail == 0 {
				// Nothing waiting: src's end, an error, or wait.
				var one [1]byte
				k, _, err := unix.Recvfrom(int(fd), one[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
				switch {
				case err == unix.EINTR:
					continue
				case err == unix.EAGAIN:
					return false
				case err != nil:
					serr = err
					return true
				case k == 0:
					eof = true
					return true
				}
				// Bytes wait that SIOCINQ did not count: they came in
				// between, or src is at the mark of TCP urgent data,
				// where SIOCINQ says 0 and splice moves nothing.
				n, capped, eof, serr = m.readPast(int(fd), w, want)
				return serr != unix.EAGAIN
			}
			g, ok := m.budget.take(min(avail, want))
			if g == 0 {
				capped = true
				return true
			}
			k, err := spliceOnce(int(fd), w, g)
			if k < g {
				m.budget.used.Add(-int64(g - k))
			}
			switch {
			case err == unix.EAGAIN && k == 0:
				// Waiting bytes that splice will not move: src is at
				// the mark of TCP urgent data.
				n, capped, eof, serr = m.readPast(int(fd), w, want)
				return serr != unix.EAGAIN
			case err == unix.EAGAIN:
				return false
			case err != nil:
				serr = err
				return true
			case k == 0:
				eof = true
				return true
			}
			n = k
			// Cut only once all that was granted moved: a short
			// move leaves budget for the next.
			capped = !ok && k == g && g < avail
			return true
		}
	})
	if err == nil {
		err = serr
	}
	return n, capped, eof, wrapErr("splice", err)
}

// readPast moves at most want of src's waiting bytes into the pipe w by
// read(2), taking them from the budget first. Splice stops at the mark
// of TCP urgent data, and SIOCINQ may say nothing waits there; a read goes
// past it (dropping the urgent byte: the proxy passes none), and splice
// moves the bytes after it. serr is EAGAIN when nothing waits after all.
func (m *meterConn) readPast(fd, w, want int) (n int, capped, eof bool, serr error) {
	buf := make([]byte, min(want, 64<<10))
	k, _, err := unix.Recvfrom(fd, buf, unix.MSG_PEEK|unix.MSG_DONTWAIT)
	switch {
	case err != nil:
		return 0, false, false, err
	case k == 0:
		return 0, false, true, nil
	}
	g, ok := m.budget.take(k)
	if g == 0 {
		return 0, true, false, nil
	}
	for {
		k, err = unix.Read(fd, buf[:g])
		if err != unix.EINTR {
			break
		}
	}
	k = max(k, 0)
	if k < g {
		m.budget.used.Add(-int64(g - k))
	}
	switch {
	case err != nil:
		return 0, false, false, err
	case k == 0:
		return 0, false, true, nil
	}
	// The pipe is empty (each move drains it) and holds want or more.
	for off := 0; off < k; {
		c, err := unix.Write(w, buf[off:k])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return off, false, false, err
		}
		off += c
	}
	return k, !ok && k == g, false, nil
}

// drain splices at most n bytes from the pipe's read end r to dst, once
// dst can take some.
func drain(rd syscall.RawConn, r int, n int) (int, error) {
	var w int
	var serr error
	err := rd.Write(func(fd uintptr) bool {
		k, err := spliceOnce(r, int(fd), n)
		switch {
		case err == unix.EAGAIN:
			return false
		case err != nil:
			serr = err
		case k == 0:
			serr = io.ErrUnexpectedEOF // an empty pipe: never expected
		}
		w = k
		return true
	})
	if err == nil {
		err = serr
	}
	return w, wrapErr("splice", err)
}

// spliceOnce moves at most n bytes from in to out without blocking,
// again after a signal.
func spliceOnce(in, out, n int) (int, error) {
	for {
		k, err := unix.Splice(in, nil, out, nil, n, unix.SPLICE_F_NONBLOCK|unix.SPLICE_F_MOVE)
		if err != unix.EINTR {
			return int(max(k, 0)), err
		}
	}
}

func wrapErr(what string, err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return os.NewSyscallError(what, errno)
	}
	return err
}
