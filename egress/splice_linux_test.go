package egress

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tcpPair is both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// TestSpliceMoves: between TCP connections on Linux, relay moves the
// bytes in the kernel (splice handles them), to the limit exactly, and
// charges and counts each.
func TestSpliceMoves(t *testing.T) {
	srcW, srcR := tcpPair(t)
	dstW, dstR := tcpPair(t)
	data := bytes.Repeat([]byte("s"), 3*pipeSize+5)
	go func() { srcW.Write(data); srcW.Close() }()
	m := &meterConn{Conn: srcR, idle: newIdle(time.Minute, dstW), budget: &budget{max: 1 << 40}}
	defer m.idle.stop()
	var count atomic.Int64
	limit := int64(2*pipeSize + 1)
	handled, err := m.splice(dstW, srcR, &count, limit)
	if !handled || err != nil {
		t.Fatalf("handled %v, %v", handled, err)
	}
	if count.Load() != limit || m.budget.used.Load() != limit {
		t.Errorf("counted %d, charged %d: want %d", count.Load(), m.budget.used.Load(), limit)
	}
	handled, err = m.splice(dstW, srcR, &count, -1) // the rest, to the end
	if !handled || err != nil {
		t.Fatalf("handled %v, %v", handled, err)
	}
	dstW.Close()
	got, _ := io.ReadAll(dstR)
	if !bytes.Equal(got, data) || count.Load() != int64(len(data)) {
		t.Errorf("moved %d bytes, counted %d, want %d", len(got), count.Load(), len(data))
	}
}

// TestSpliceNotTCP: anything but two TCP connections is left to the
// copy, untouched.
func TestSpliceNotTCP(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	m := &meterConn{Conn: a, budget: &budget{max: 1}}
	if handled, _ := m.splice(a, b, new(atomic.Int64), -1); handled {
		t.Error("spliced a net.Pipe")
	}
}

// sendOOB sends b as TCP urgent data (MSG_OOB) on c.
func sendOOB(t *testing.T, c net.Conn, b []byte) {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	rc.Write(func(fd uintptr) bool {
		if err := unix.Send(int(fd), b, unix.MSG_OOB); err != nil {
			t.Errorf("send MSG_OOB: %v", err)
		}
		return true
	})
}

// TestUrgentByte: a TCP urgent byte, from the sandbox or from a host, in
// a tunnel or in a forwarded body, stalls nothing. At its mark splice
// moves nothing and SIOCINQ says nothing waits; the relay reads past it
// (dropping the urgent byte), and the bytes after it pass.
func TestUrgentByte(t *testing.T) {
	const n = 200
	after := bytes.Repeat([]byte("u"), n)
	t.Run("sandbox to host", func(t *testing.T) {
		got := make(chan int, 1)
		ln := tcpServer(t, func(c net.Conn) {
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			b, _ := io.ReadAll(c)
			got <- len(b)
		})
		h := newHarness(t, []string{ln.Addr().String()})
		conn, _ := h.tunnelTo(ln.Addr().String())
		sendOOB(t, conn, []byte("!"))
		for i := range n {
			conn.Write(after[i : i+1])
			time.Sleep(time.Millisecond)
		}
		conn.(*net.TCPConn).CloseWrite()
		if k := <-got; k != n {
			t.Errorf("the host got %d of the %d bytes sent after the urgent byte", k, n)
		}
	})
	t.Run("host to sandbox", func(t *testing.T) {
		ln := tcpServer(t, func(c net.Conn) {
			sendOOB(t, c, []byte("!"))
			c.Write(after)
			c.Close()
		})
		h := newHarness(t, []string{ln.Addr().String()})
		conn, br := h.tunnelTo(ln.Addr().String())
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if b, _ := io.ReadAll(br); !bytes.Equal(b, after) {
			t.Errorf("the sandbox got %q, want the %d bytes after the urgent byte", b, n)
		}
	})
	t.Run("forwarded body", func(t *testing.T) {
		ln := tcpServer(t, func(c net.Conn) {
			http.ReadRequest(bufio.NewReader(c))
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", n)
			sendOOB(t, c, []byte("!"))
			c.Write(after)
		})
		h := newHarness(t, []string{ln.Addr().String()})
		conn := dialRaw(t, h.addr)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "GET http://%s/ HTTP/1.1\r\n\r\n", ln.Addr())
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := io.ReadAll(resp.Body); err != nil || !bytes.Equal(b, after) {
			t.Errorf("the body: %v, %q; want the %d bytes after the urgent byte", err, b, n)
		}
	})
}
