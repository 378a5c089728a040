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
// host to the sandbox, or (false) the other way.
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
	_, err := io.Copy(dst, r)
	return err
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
