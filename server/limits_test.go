package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/service"
)

// serveTest serves a server of opt (Service and Token filled in) on a
// loopback TCP listener until the test ends, and returns its address.
func serveTest(t *testing.T, opt Options) string {
	t.Helper()
	opt.Service, opt.Token = service.New(t.TempDir(), &fuzztest.NoEngines{}), testToken
	s, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ListenTCP("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return l.Addr().String()
}

// A body trickled one byte at a time is cut at the read deadline on every
// route, the Extra handlers' (/mcp) too.
func TestReadDeadlineEveryRoute(t *testing.T) {
	read := make(chan error, 1)
	mcp := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		read <- err
	})
	addr := serveTest(t, Options{ReadTimeout: 500 * time.Millisecond, Extra: map[string]http.Handler{"/mcp": mcp}})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 400 // 20s at one byte every 50ms
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", testToken, n)
	go func() {
		for range n {
			if _, err := c.Write([]byte("x")); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	if err := <-read; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the handler read the trickled body to %v, want the read deadline", err)
	}
}

// Once the request is read, net/http lifts the deadline: a handler that
// runs past it keeps its context (an exec streaming its output, an MCP
// stream). The server relies on this; a deadline set after the body is
// read would cancel the context of every long request.
func TestReadDeadlineLiftedAfterRequest(t *testing.T) {
	const timeout = 200 * time.Millisecond
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		select {
		case <-r.Context().Done():
			http.Error(w, "canceled", http.StatusInternalServerError)
		case <-time.After(5 * timeout):
			io.WriteString(w, "ok")
		}
	})
	addr := serveTest(t, Options{ReadTimeout: timeout, Extra: map[string]http.Handler{"/long": h}})
	for _, method := range []string{"GET", "POST"} {
		req, _ := http.NewRequest(method, "http://"+addr+"/long", bytes.NewReader([]byte(`{"a":1}`)))
		if method == "GET" {
			req.Body, req.ContentLength = nil, 0
		}
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "ok" {
			t.Fatalf("%s: %d %q: the request's context ended after it was read", method, resp.StatusCode, b)
		}
	}
}

// Past MaxConnections, a new connection waits until one closes.
func TestMaxConnections(t *testing.T) {
	addr := serveTest(t, Options{MaxConnections: 2})
	get := func(c net.Conn) *bufio.Reader {
		fmt.Fprintf(c, "GET /v1/healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", testToken)
		return bufio.NewReader(c)
	}
	ok := func(br *bufio.Reader) error {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := ok(get(c)); err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	third, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	br := get(third)
	third.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if err := ok(br); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a third connection past MaxConnections 2 was served: %v", err)
	}
	held[0].Close()
	third.SetReadDeadline(time.Time{})
	if err := ok(br); err != nil {
		t.Fatalf("the waiting connection, once one closed: %v", err)
	}
}

// The stdin queue holds at most stdinQueue bytes for a program that does
// not read: past that, send waits (and gives up with its context).
func TestStdinFeedBounded(t *testing.T) {
	f := newStdinFeed()
	defer f.pr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	msg := make([]byte, 256<<10)
	taken := 0
	for range 64 {
		if f.send(ctx, msg) == nil {
			taken += len(msg)
		}
	}
	if taken > stdinQueue {
		t.Fatalf("the feed took %d bytes for a program that reads none; the queue is %d", taken, stdinQueue)
	}
	// A waiting send goes on once the program reads, and every byte
	// arrives in order.
	sent := make(chan error, 1)
	last := bytes.Repeat([]byte("z"), 100)
	go func() { sent <- f.send(context.Background(), last) }()
	got, err := io.ReadAll(io.LimitReader(f.pr, int64(taken+len(last))))
	if err != nil || len(got) != taken+len(last) || !bytes.HasSuffix(got, last) {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	// After close, sends are dropped and stdin ends.
	f.close()
	if err := f.send(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(f.pr); len(b) != 0 || err != nil {
		t.Fatalf("after close: %d bytes, %v", len(b), err)
	}
}

// countWriter is a ResponseWriter that keeps only the count.
type countWriter struct {
	h http.Header
	n atomic.Int64
}

func (c *countWriter) Header() http.Header         { return c.h }
func (c *countWriter) WriteHeader(int)             {}
func (c *countWriter) Write(p []byte) (int, error) { c.n.Add(int64(len(p))); return len(p), nil }

// writeFusion streams the fetched files as base64 from the spool: the
// response is exact (its length declared), and never whole in memory.
func TestWriteFusionStreams(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "spool")
	if err != nil {
		t.Fatal(err)
	}
	spool := &spoolFile{f: f, b: &spoolBudget{max: 64 << 20}}
	defer spool.Close()
	small := []byte("hello \"world\"\n")
	big := bytes.Repeat([]byte("0123456789abcdef"), 2<<20) // 32MiB
	spool.Write(small)
	spool.Write(big)
	got := &fetched{spool: spool, files: []fetchedFile{{name: `a "b".txt`, off: 0, size: int64(len(small))}, {name: "big.txt", off: int64(len(small)), size: int64(len(big))}},
		omitted: []FusionOmitted{{Name: "c.txt", Reason: "too_large", Message: "past the cap"}}}
	resp := FusionResponse{Status: fusionSuccess, FilesOmitted: got.omitted}

	rec := httptest.NewRecorder()
	if err := writeFusion(rec, resp, got); err != nil {
		t.Fatal(err)
	}
	if cl := rec.Header().Get("Content-Length"); cl != strconv.Itoa(rec.Body.Len()) {
		t.Fatalf("Content-Length %s for %d bytes", cl, rec.Body.Len())
	}
	var out struct {
		Status       string
		Files        map[string]string
		FilesOmitted []FusionOmitted `json:"files_omitted"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	a, _ := base64.StdEncoding.DecodeString(out.Files[`a "b".txt`])
	b, _ := base64.StdEncoding.DecodeString(out.Files["big.txt"])
	if out.Status != fusionSuccess || !bytes.Equal(a, small) || !bytes.Equal(b, big) || len(out.FilesOmitted) != 1 || out.FilesOmitted[0].Reason != "too_large" {
		t.Fatalf("status %s, files %d, omitted %+v", out.Status, len(out.Files), out.FilesOmitted)
	}

	cw := &countWriter{h: http.Header{}}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := writeFusion(cw, resp, got); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
		t.Fatalf("writing a 32MiB file allocated %d bytes", alloc)
	}

	// With nothing fetched, files is {} and files_omitted [].
	rec = httptest.NewRecorder()
	writeFusion(rec, FusionResponse{Status: fusionSandboxError, Message: "x"}, nil)
	if !bytes.HasSuffix(rec.Body.Bytes(), []byte(`"files_omitted":[],"files":{}}`+"\n")) {
		t.Fatalf("%s", rec.Body.Bytes())
	}
}
