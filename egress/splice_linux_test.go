package egress

import (
	"bytes"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
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
