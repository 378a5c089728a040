package egress

import (
	"io"
	"net"
)

// pipeSize is the most one move of splice_linux.go takes: the pipe the
// bytes pass through.
const pipeSize = 1 << 20

// relay copies src to dst until src's end, limit bytes (limit < 0: no
// limit), an error or the byte cap, metered by m: one of src and dst is
// m, the other the client's activeConn. down says which way: from the
// host to the sandbox, or (false) the other way. A failure to write to
// dst is a *writeError: dst's side went away (or, when dst is m, the
// byte cap cut the write); any other error is src's or the byte cap's.
//
// Between two TCP connections on Linux the bytes move in the kernel
// (splice_linux.go): each move takes from the budget the bytes the
// source has waiting, at most a pipe's worth, before it moves them,
// gives back what it did not move, and resets the idle timer; the
// Record's counts are the bytes written to dst (and, at a cut, those left in
// the pipe, which the budget paid for). Otherwise it is a copy
// through m's Read and Write, which meter every read the same way.
func (m *meterConn) relay(dst, src net.Conn, down bool, limit int64) error {
	count := &m.up
	if down {
		count = &m.down
	}
	if handled, err := m.splice(raw(dst), raw(src), count, limit); handled {
		return err
	}
	var r io.Reader = src
	if limit >= 0 {
		r = io.LimitReader(src, limit)
	}
	fw := &failWriter{w: dst}
	if _, err := io.Copy(fw, r); err != nil {
		if fw.failed {
			return &writeError{err}
		}
		return err
	}
	return nil
}

// writeError is a relay's failure to write to its destination, as
// against to read from its source: the destination's side went away.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// failWriter writes to w and notes whether a write failed, so that a
// copy that fails can tell its destination's end from its source's.
type failWriter struct {
	w      io.Writer
	failed bool
}

func (f *failWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err != nil || n < len(p) {
		f.failed = true
	}
	return n, err
}

// raw is the connection under a metered or active one.
func raw(c net.Conn) net.Conn {
	switch c := c.(type) {
	case *meterConn:
		return c.Conn
	case activeConn:
		return c.Conn
	}
	return c
}
