package egress

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// tunnelTo opens a CONNECT tunnel through h to addr and returns the
// connection and a reader past the proxy's answer.
func (h *harness) tunnelTo(addr string) (net.Conn, *bufio.Reader) {
	h.t.Helper()
	conn := dialRaw(h.t, h.addr)
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\n\r\n", addr)
	br := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		h.t.Fatalf("CONNECT %s: %v", addr, err)
	}
	return conn, br
}

// TestByteLimitExact: a cap that is no multiple of a read or a move, on
// either side of a pipe's worth, passes exactly its bytes and no more:
// the last move is cut to what the budget has left.
func TestByteLimitExact(t *testing.T) {
	for _, max := range []int64{1, 4096 + 3, pipeSize - 1, pipeSize + 1, 3*pipeSize + 17} {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			ln := tcpServer(t, func(c net.Conn) { c.Write(bytes.Repeat([]byte("d"), int(max)+4*pipeSize)) })
			h := newHarness(t, []string{ln.Addr().String()}, WithLimits(Limits{Bytes: max}))
			_, br := h.tunnelTo(ln.Addr().String())
			n, _ := io.Copy(io.Discard, br)
			if n != max {
				t.Errorf("read %d bytes through a cap of %d", n, max)
			}
			if r := h.last(); r.Reason != ReasonByteLimit || r.BytesDown != n || r.BytesUp != 0 {
				t.Errorf("record %+v, read %d", r, n)
			}
			if got := h.p.Stats().Bytes; got != max {
				t.Errorf("budget used %d, want %d", got, max)
			}
		})
	}
}

// TestByteLimitShared: connections of one sandbox, both ways at once,
// share one budget: the records add up to exactly the cap (none holds
// back budget it did not use), and no more than the cap passes.
func TestByteLimitShared(t *testing.T) {
	const max = 2*pipeSize + 12345
	var mu sync.Mutex
	got, ended := 0, 0 // bytes the host received, connections it saw end
	start := make(chan struct{})
	ln := tcpServer(t, func(c net.Conn) {
		<-start // all tunnels are open
		go c.Write(bytes.Repeat([]byte("d"), 2*max))
		n, _ := io.Copy(io.Discard, c)
		mu.Lock()
		got += int(n)
		ended++
		mu.Unlock()
	})
	h := newHarness(t, []string{ln.Addr().String()}, WithLimits(Limits{Bytes: max}))
	var wg sync.WaitGroup
	var down [3]int64
	for i := range down {
		conn, br := h.tunnelTo(ln.Addr().String())
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			conn.Write(bytes.Repeat([]byte("u"), max))
		}()
		go func() {
			defer wg.Done()
			down[i], _ = io.Copy(io.Discard, br)
		}()
	}
	close(start)
	wg.Wait()
	recs := h.records(len(down))
	var sum, read int64
	for i, r := range recs {
		if r.Reason != ReasonByteLimit {
			t.Errorf("record %+v", r)
		}
		sum += r.BytesUp + r.BytesDown
		read += down[i]
	}
	if sum != max || h.p.Stats().Bytes != max {
		t.Errorf("records add up to %d, budget used %d: want %d", sum, h.p.Stats().Bytes, max)
	}
	// What passed: a cut connection may lose what its sockets still held
	// (a close with bytes unread is a reset), never pass more.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		up, n := int64(got), ended
		mu.Unlock()
		if n == len(down) {
			if up+read > max {
				t.Errorf("%d bytes up and %d down passed a cap of %d", up, read, max)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the host's connections ended", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestIdleTrickle: a tunnel whose bytes come slower than a move fills
// but faster than the idle timeout is not idle: each byte moved resets
// the timer, so it lives longer than the timeout (a byte every 100 ms
// for a second, against 600 ms: room for a loaded machine).
func TestIdleTrickle(t *testing.T) {
	const bytes = 10
	ln := tcpServer(t, func(c net.Conn) {
		for range bytes {
			c.Write([]byte("t"))
			time.Sleep(100 * time.Millisecond)
		}
		c.Close()
	})
	h := newHarness(t, []string{ln.Addr().String()}, WithLimits(Limits{Idle: 600 * time.Millisecond}))
	conn, br := h.tunnelTo(ln.Addr().String())
	n, _ := io.Copy(io.Discard, br)
	conn.Close()
	if n != bytes {
		t.Errorf("read %d bytes, want %d", n, bytes)
	}
	if r := h.last(); r.Reason != ReasonClosed || r.BytesDown != bytes {
		t.Errorf("record %+v", r)
	}
}

// TestTunnelHalfClose: the sandbox's end of sending reaches the host as
// a half-close, and the host's answer after it still comes back.
func TestTunnelHalfClose(t *testing.T) {
	ln := tcpServer(t, func(c net.Conn) {
		b, _ := io.ReadAll(c) // to the sandbox's half-close
		c.Write(append([]byte("got "), b...))
		c.Close()
	})
	h := newHarness(t, []string{ln.Addr().String()})
	conn, br := h.tunnelTo(ln.Addr().String())
	io.WriteString(conn, "ping")
	conn.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(br)
	if err != nil || string(b) != "got ping" {
		t.Fatalf("read %q, %v", b, err)
	}
	if r := h.last(); r.Reason != ReasonClosed || r.BytesUp != 4 || r.BytesDown != 8 {
		t.Errorf("record %+v", r)
	}
}

// pattern is n bytes that do not repeat in short runs, so that a byte
// out of place shows.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// TestForwardRelay: a forwarded response with a Content-Length arrives
// whole and in order, part from the proxy's read buffer and the rest
// relayed, on a connection kept for the next request; the record counts
// every byte the host sent.
func TestForwardRelay(t *testing.T) {
	body := pattern(3*pipeSize + 333)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	}))
	defer s.Close()
	h := newHarness(t, []string{s.Listener.Addr().String()})
	cl := h.client(nil)
	for i := range 2 {
		code, got := get(t, cl, s.URL)
		if code != 200 || got != string(body) {
			t.Fatalf("request %d: %d, %d bytes, body intact %v", i, code, len(got), got == string(body))
		}
		if r := h.last(); r.Reason != ReasonClosed || r.BytesDown < int64(len(body)) || r.BytesDown > int64(len(body))+512 {
			t.Errorf("record %+v", r)
		}
	}
}

// TestForwardRelayByteLimit: a cap in the middle of a relayed body
// passes exactly the cap, both ways together.
func TestForwardRelayByteLimit(t *testing.T) {
	const max = pipeSize + 4321
	body := pattern(4 * pipeSize)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	}))
	defer s.Close()
	h := newHarness(t, []string{s.Listener.Addr().String()}, WithLimits(Limits{Bytes: max}))
	resp, err := h.client(nil).Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if n >= int64(len(body)) {
		t.Fatalf("read all %d bytes through a cap of %d", n, max)
	}
	r := h.last()
	if r.Reason != ReasonByteLimit || r.BytesUp+r.BytesDown != max || h.p.Stats().Bytes != max {
		t.Errorf("record %+v, budget used %d, want %d", r, h.p.Stats().Bytes, max)
	}
}

// TestForwardRelayShort: a host that ends before its Content-Length
// leaves the sandbox a short body and an error, not a kept connection.
func TestForwardRelayShort(t *testing.T) {
	ln := tcpServer(t, func(c net.Conn) {
		bufio.NewReader(c).ReadString('\n')
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", 2*pipeSize)
		c.Write(pattern(pipeSize))
		c.Close()
	})
	h := newHarness(t, []string{ln.Addr().String()})
	resp, err := h.client(nil).Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil || n != pipeSize {
		t.Errorf("read %d bytes, %v; want %d and an error", n, err, pipeSize)
	}
	if r := h.last(); r.Reason != ReasonUpstream || r.BytesDown < pipeSize {
		t.Errorf("record %+v", r)
	}
}

// TestTunnelPipelined: bytes the sandbox sent in the same write as its
// CONNECT (read with the header) reach the host before the rest.
func TestTunnelPipelined(t *testing.T) {
	ln := tcpServer(t, func(c net.Conn) {
		b, _ := io.ReadAll(c)
		c.Write(b)
		c.Close()
	})
	h := newHarness(t, []string{ln.Addr().String()})
	conn := dialRaw(t, h.addr)
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\n\r\nfirst ", ln.Addr())
	br := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v", err)
	}
	io.WriteString(conn, "second")
	conn.(*net.TCPConn).CloseWrite()
	if b, err := io.ReadAll(br); err != nil || string(b) != "first second" {
		t.Fatalf("read %q, %v", b, err)
	}
	if r := h.last(); r.BytesUp != 12 || r.BytesDown != 12 {
		t.Errorf("record %+v", r)
	}
}

// TestDownloadAbandoned: a sandbox that closes its connection in the
// middle of a forwarded response's body ended the request itself: the
// record says closed, not the host's upstream_error, whether the body is
// relayed (a Content-Length, spliced on Linux), copied (chunked), or
// comes through a credential route's TLS.
func TestDownloadAbandoned(t *testing.T) {
	// serve answers one request with a body far larger than the sockets
	// hold, until writing to the proxy fails.
	serve := func(w http.ResponseWriter, length bool) {
		if length {
			w.Header().Set("Content-Length", strconv.Itoa(1<<30))
		}
		chunk := pattern(64 << 10)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}
	for _, tc := range []struct {
		name   string
		length bool
		route  bool
	}{
		{"length", true, false},
		{"chunked", false, false},
		{"route", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serve(w, tc.length) })
			var h *harness
			var url, kind, host string
			if tc.route {
				u := newTLSUpstream(t, handler)
				h = routeHarness(t, u, u.roots)
				url, kind, host = "http://example.com/", KindCredential, "example.com"
			} else {
				s := httptest.NewServer(handler)
				defer s.Close()
				h = newHarness(t, []string{s.Listener.Addr().String()})
				url, kind, host = s.URL+"/", KindHTTP, "127.0.0.1"
			}
			conn := dialRaw(t, h.addr)
			fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", url)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("GET: %v", err)
			}
			if _, err := io.ReadFull(resp.Body, make([]byte, 256<<10)); err != nil {
				t.Fatalf("reading the body's start: %v", err)
			}
			conn.Close()
			r := h.last()
			checkRecord(t, r, kind, host, true, ReasonClosed)
			// Nor does the proxy read on past the sandbox's end (closing
			// a chunked body would read it to the byte cap).
			if r.Status != 200 || r.BytesDown < 256<<10 || r.BytesDown > 64<<20 {
				t.Errorf("record %+v", r)
			}
		})
	}
}
