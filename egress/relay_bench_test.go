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
	"testing"
)

// benchSize is what one round of the relay benchmarks downloads.
const benchSize = 64 << 20

// BenchmarkTunnel downloads benchSize bytes through a CONNECT tunnel, on
// loopback: the proxy's copy, without TLS's cost on either side.
func BenchmarkTunnel(b *testing.B) {
	blob := bytes.Repeat([]byte("airlock egress "), benchSize/15+1)[:benchSize]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { c.Write(blob); c.Close() }()
		}
	}()
	h := newHarness(b, []string{ln.Addr().String()}, WithLimits(Limits{Bytes: 1 << 62}))
	b.SetBytes(benchSize)
	b.ResetTimer()
	for range b.N {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", ln.Addr())
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
			b.Fatalf("CONNECT: %v", err)
		}
		if n, _ := io.Copy(io.Discard, br); n != benchSize {
			b.Fatalf("read %d bytes, want %d", n, benchSize)
		}
		c.Close()
	}
}

// BenchmarkForward downloads benchSize bytes over plain HTTP through the
// proxy, on loopback.
func BenchmarkForward(b *testing.B) {
	blob := bytes.Repeat([]byte("airlock egress "), benchSize/15+1)[:benchSize]
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(blob)))
		w.Write(blob)
	}))
	defer s.Close()
	h := newHarness(b, []string{s.Listener.Addr().String()}, WithLimits(Limits{Bytes: 1 << 62}))
	cl := h.client(nil)
	b.SetBytes(benchSize)
	b.ResetTimer()
	for range b.N {
		resp, err := cl.Get(s.URL)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n != benchSize {
			b.Fatalf("read %d bytes, want %d", n, benchSize)
		}
	}
}
