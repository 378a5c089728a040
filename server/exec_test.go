package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/runner"
)

// keptSession is an exec session kept for reconnects (as a WebSocket
// exec's) that has written out.
func keptSession(id, sandboxID string, out [2][]byte) *execSession {
	e := newExecSession(id, sandboxID, faceKept)
	e.kill = func() {}
	for i := range out {
		streamWriter{e, i}.Write(out[i])
	}
	return e
}

// A reader that drops out at any point and resumes from its offsets gets
// every byte once, in order, while the writers keep writing.
func TestPumpResumesWithoutLossOrRepeat(t *testing.T) {
	e := newExecSession("ex-1", "", faceKept)
	var want [2]bytes.Buffer
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := streamWriter{e, i}
			for n := range 2000 {
				chunk := fmt.Appendf(nil, "%s-%05d\n", streamNames[i], n)
				want[i].Write(chunk)
				w.Write(chunk)
			}
		}()
	}
	go func() { wg.Wait(); e.finish(runner.Result{Reason: runner.ReasonExited}, nil) }()

	var got [2][]byte
	var exit *exitEvent
	for drops := 0; exit == nil; drops++ {
		ctx, cancel := context.WithCancel(context.Background())
		seen := 0
		rd, err := e.attach([2]int64{int64(len(got[0])), int64(len(got[1]))})
		if err != nil {
			t.Fatal(err)
		}
		err = pump(ctx, rd, true, func(v any) error {
			switch ev := v.(type) {
			case outEvent:
				i := 0
				if ev.Type == "stderr" {
					i = 1
				}
				if ev.Offset != int64(len(got[i])) {
					t.Fatalf("%s offset %d, have %d", ev.Type, ev.Offset, len(got[i]))
				}
				b, _ := base64.StdEncoding.DecodeString(ev.DataB64)
				if ev.Data != string(b) {
					t.Fatalf("data and data_b64 differ")
				}
				got[i] = append(got[i], b...)
			case exitEvent:
				exit = &ev
				return nil
			}
			if seen++; seen == 3 && drops < 50 {
				cancel() // the connection drops
				return context.Canceled
			}
			return nil
		})
		rd.detach()
		cancel()
		if err != nil && exit != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		if !bytes.Equal(got[i], want[i].Bytes()) {
			t.Fatalf("%s: got %d bytes, want %d", streamNames[i], len(got[i]), want[i].Len())
		}
	}
	if exit.Result.Reason != runner.ReasonExited {
		t.Fatalf("exit %+v", exit)
	}
}

// TestSessionWindow: a stream's writer waits once the stream holds its
// window (and a kept exec's retention), whatever it writes; a reader
// taking bytes lets it on; once the exec is being ended it no longer
// waits, and what does not fit is dropped, the stream ending there.
func TestSessionWindow(t *testing.T) {
	for _, face := range []execFace{faceStream, faceKept} {
		e := newExecSession("ex-1", "", face)
		var written atomic.Int64
		wrote := make(chan struct{})
		go func() {
			defer close(wrote)
			chunk := bytes.Repeat([]byte("x"), 32<<10)
			for range (64 << 20) / len(chunk) {
				streamWriter{e, streamStdout}.Write(chunk)
				written.Add(int64(len(chunk)))
			}
		}()
		waitFor(t, "the writer to fill the window", func() bool { return e.held() >= e.cap })
		rd, err := e.attach([2]int64{})
		if err != nil {
			t.Fatal(err)
		}
		chunks, _, _ := rd.snapshot()
		rd.advance(streamStdout, int64(len(chunks[0])))
		// The reader was sent the whole window: all but the retention
		// goes, and the writer fills the window again.
		waitFor(t, "the writer to go on", func() bool { return written.Load() >= 2*e.cap-e.retain-32<<10 })
		waitFor(t, "the writer to fill the window again", func() bool { return e.held() == e.cap })
		if n := written.Load(); n > 2*e.cap-e.retain {
			t.Fatalf("face %d: %d bytes written past a window of %d", face, n, e.cap)
		}
		e.end()
		<-wrote
		if h := e.held(); h > e.cap {
			t.Errorf("face %d: %d bytes held once ended, past %d", face, h, e.cap)
		}
		if !e.out[streamStdout].cut {
			t.Errorf("face %d: the stream was not cut where bytes were dropped", face)
		}
		rd.detach()
	}
}

// TestReconnectRetention: a reconnect within the retention behind what
// was sent gets the rest; one from before it gets not_found naming the
// first offset kept.
func TestReconnectRetention(t *testing.T) {
	const total = 3*execRetain + 12345
	out := make([]byte, total)
	for i := range out {
		out[i] = byte('a' + i%26)
	}
	release := make(chan struct{})
	s, _, _ := liveServer(t, runner.Ceilings{}, 64<<20, func(ctx context.Context, p *engine.Process) (engine.Exit, error) {
		p.Stdout.Write(out)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return engine.Exit{}, nil
	})
	defer s.inflight.Wait()
	defer close(release)
	hs := liveHTTP(t, s)
	conn, ev := wsExec(t, wsURL(hs), `{"type":"execute","argv":["x"]}`)
	id := ev.ExecID
	var got int64
	for got < total {
		ev = readEvent(t, conn)
		if ev.Type != "stdout" || ev.Offset != got {
			t.Fatalf("event %+v at %d", ev, got)
		}
		b, _ := base64.StdEncoding.DecodeString(ev.DataB64)
		got += int64(len(b))
	}
	conn.CloseNow()
	e := s.execs.get(id)
	waitFor(t, "the client's leaving to free what it was sent", func() bool { return e.held() <= execRetain })

	conn, ev = wsExec(t, wsURL(hs), fmt.Sprintf(`{"type":"reconnect","exec_id":%q,"stdout_offset":%d}`, id, total-execRetain-1))
	conn.CloseNow()
	want := fmt.Sprintf("before offset %d of stdout is no longer kept", total-execRetain)
	if ev.Type != "error" || ev.Error.Kind != KindNotFound || !strings.Contains(ev.Error.Message, want) {
		t.Fatalf("reconnect from before the retention: %+v, want not_found saying %q", ev, want)
	}

	from := int64(total - execRetain)
	conn, ev = wsExec(t, wsURL(hs), fmt.Sprintf(`{"type":"reconnect","exec_id":%q,"stdout_offset":%d}`, id, from))
	defer conn.CloseNow()
	if ev.Type != "started" {
		t.Fatalf("reconnect within the retention: %+v", ev)
	}
	var again []byte
	for int64(len(again)) < total-from {
		ev = readEvent(t, conn)
		if ev.Type != "stdout" || ev.Offset != from+int64(len(again)) {
			t.Fatalf("event %+v after %d bytes from %d", ev, len(again), from)
		}
		b, _ := base64.StdEncoding.DecodeString(ev.DataB64)
		again = append(again, b...)
	}
	if !bytes.Equal(again, out[from:]) {
		t.Fatal("the bytes replayed from the retention differ")
	}
}

// floodServer is a live server whose exec writes total bytes to stdout as
// fast as it may, counting them in written.
func floodServer(t *testing.T, total int64) (s *Server, written *atomic.Int64) {
	written = new(atomic.Int64)
	s, _, _ = liveServer(t, runner.Ceilings{}, 4*total, func(ctx context.Context, p *engine.Process) (engine.Exit, error) {
		chunk := bytes.Repeat([]byte("y"), 32<<10)
		for written.Load() < total {
			p.Stdout.Write(chunk)
			written.Add(int64(len(chunk)))
		}
		return engine.Exit{}, nil
	})
	return s, written
}

// TestWSPausedWithoutClient: a WebSocket exec whose client left holds at
// most its window and retention per stream, its program waiting on its
// writes (for execUnread); a reconnect from offset 0 then gets every
// byte, and the exit.
func TestWSPausedWithoutClient(t *testing.T) {
	defer func(d time.Duration) { execUnread = d }(execUnread)
	execUnread = time.Minute
	const total = 16 << 20
	s, written := floodServer(t, total)
	defer s.inflight.Wait()
	hs := liveHTTP(t, s)
	conn, ev := wsExec(t, wsURL(hs), `{"type":"execute","argv":["x"]}`)
	conn.CloseNow()
	e := s.execs.get(ev.ExecID)
	waitFor(t, "the detached exec to fill its window", func() bool { return e.held() >= execWindow })
	settled(t, written.Load)
	if n, h := written.Load(), e.held(); n >= total || h > execRetain+execWindow {
		t.Fatalf("a detached exec wrote %d bytes, holding %d: want it paused holding at most %d", n, h, execRetain+execWindow)
	}
	conn, ev = wsExec(t, wsURL(hs), fmt.Sprintf(`{"type":"reconnect","exec_id":%q}`, ev.ExecID))
	defer conn.CloseNow()
	var got int64
	for ev = readEvent(t, conn); ev.Type == "stdout"; ev = readEvent(t, conn) {
		if ev.Offset != got {
			t.Fatalf("offset %d after %d bytes", ev.Offset, got)
		}
		b, _ := base64.StdEncoding.DecodeString(ev.DataB64)
		got += int64(len(b))
	}
	if ev.Type != "exit" || got != total {
		t.Fatalf("got %d bytes then %+v, want %d then exit", got, ev, total)
	}
}

// TestWSUnreadDropsOldest: a WebSocket exec with no client for
// execUnread is not held: its program goes on to its end, the stream
// keeping its newest bytes (at most its window and retention); a
// reconnect from an offset that went gets not_found naming the first one
// kept, and one from there gets the rest and the exit.
func TestWSUnreadDropsOldest(t *testing.T) {
	defer func(d time.Duration) { execUnread = d }(execUnread)
	execUnread = 50 * time.Millisecond
	const total = 16 << 20
	out := make([]byte, total)
	for i := range out {
		out[i] = byte('a' + i%26)
	}
	s, _, _ := liveServer(t, runner.Ceilings{}, 64<<20, func(ctx context.Context, p *engine.Process) (engine.Exit, error) {
		for b := out; len(b) > 0; b = b[32<<10:] {
			p.Stdout.Write(b[:32<<10])
		}
		return engine.Exit{}, nil
	})
	defer s.inflight.Wait()
	hs := liveHTTP(t, s)
	conn, ev := wsExec(t, wsURL(hs), `{"type":"execute","argv":["x"]}`)
	conn.CloseNow()
	e := s.execs.get(ev.ExecID)
	select {
	case <-e.wait():
	case <-time.After(20 * time.Second):
		e.end() // so that the server's inflight wait ends
		t.Fatal("the exec with no client did not end: its writes were held")
	}
	if h := e.held(); h > execRetain+execWindow {
		t.Fatalf("holding %d bytes, past %d", h, execRetain+execWindow)
	}
	kept := e.out[streamStdout].base
	conn, ev = wsExec(t, wsURL(hs), fmt.Sprintf(`{"type":"reconnect","exec_id":%q}`, ev.ExecID))
	conn.CloseNow()
	if want := fmt.Sprintf("before offset %d of stdout is no longer kept", kept); ev.Type != "error" || ev.Error.Kind != KindNotFound || !strings.Contains(ev.Error.Message, want) {
		t.Fatalf("reconnect from 0: %+v; want not_found saying %q", ev, want)
	}
	conn, ev = wsExec(t, wsURL(hs), fmt.Sprintf(`{"type":"reconnect","exec_id":%q,"stdout_offset":%d}`, e.id, kept))
	defer conn.CloseNow()
	var got []byte
	for ev = readEvent(t, conn); ev.Type == "stdout"; ev = readEvent(t, conn) {
		b, _ := base64.StdEncoding.DecodeString(ev.DataB64)
		got = append(got, b...)
	}
	if ev.Type != "exit" || !bytes.Equal(got, out[kept:]) {
		t.Fatalf("from %d: %d bytes then %+v; want the newest %d bytes then exit", kept, len(got), ev, total-kept)
	}
}

// TestWSClientLeavesMidFlood: a client that reads slowly, so that the
// exec's window is full and its writer waits for that client, then
// leaves, does not freeze the exec: its leaving wakes the writer, which
// then waits execUnread at most for a reconnect and goes on to its end.
func TestWSClientLeavesMidFlood(t *testing.T) {
	defer func(d time.Duration) { execUnread = d }(execUnread)
	execUnread = 50 * time.Millisecond
	const total = 64 << 20
	s, written := floodServer(t, total)
	defer s.inflight.Wait()
	hs := liveHTTP(t, s)
	conn, ev := wsExec(t, wsURL(hs), `{"type":"execute","argv":["x"]}`)
	e := s.execs.get(ev.ExecID)
	readEvent(t, conn) // then no more: the socket's buffers fill, then the window
	waitFor(t, "the window to fill while the client is attached", func() bool { return e.held() >= e.cap })
	settled(t, written.Load)
	conn.CloseNow()
	select {
	case <-e.wait():
	case <-time.After(10 * time.Second):
		e.end() // so that the server's inflight wait ends
		t.Fatalf("the exec froze once its client left, at %d of %d bytes written", written.Load(), total)
	}
	if n := written.Load(); n < total {
		t.Fatalf("the exec ended having written %d of %d bytes", n, total)
	}
}

// TestPlainExecKeepsNoOutput: POST exec without NDJSON answers the
// Result, which carries the output: its session keeps none of it.
func TestPlainExecKeepsNoOutput(t *testing.T) {
	s, _, _ := liveServer(t, runner.Ceilings{}, 8<<20, func(ctx context.Context, p *engine.Process) (engine.Exit, error) {
		if p.Stdout != nil {
			p.Stdout.Write(bytes.Repeat([]byte("z"), 4<<20))
		}
		return engine.Exit{}, nil
	})
	sb, done, err := s.svc.Open(context.Background(), liveID)
	if err != nil {
		t.Fatal(err)
	}
	e, err := s.startExec(context.Background(), sb, done, runner.ExecSpec{Argv: []string{"x"}}, false, faceResult)
	if err != nil {
		t.Fatal(err)
	}
	<-e.wait()
	res, err := e.outcome()
	if err != nil || res.Stdout.Bytes != 4<<20 || len(res.Stdout.Head) != 4<<20 {
		t.Fatalf("Result %d bytes (%d kept), %v; want all 4MiB", res.Stdout.Bytes, len(res.Stdout.Head), err)
	}
	if h := e.held(); h != 0 {
		t.Errorf("the session of a plain POST exec keeps %d bytes of output", h)
	}
	s.inflight.Wait()
}

// TestStreamedExecResultBounded: a streamed exec's client gets the whole
// output in its frames, and its Result keeps execResultBytes of each
// head (with the tail, total and sha256), not the output limit's; a plain
// POST exec's Result, the only carrier of its output, keeps it whole.
func TestStreamedExecResultBounded(t *testing.T) {
	const total = 3 << 20
	out := make([]byte, total)
	for i := range out {
		out[i] = 'a' + byte(i/4093%26)
	}
	sum := sha256.Sum256(out)
	s, _, _ := liveServer(t, runner.Ceilings{}, 8<<20, func(ctx context.Context, p *engine.Process) (engine.Exit, error) {
		for b := out; len(b) > 0; b = b[min(len(b), 100<<10):] {
			p.Stdout.Write(b[:min(len(b), 100<<10)])
		}
		return engine.Exit{}, nil
	})
	rec := do(t, s.Handler(), false, "POST", "/v1/sandboxes/"+liveID+"/exec", `{"argv":["x"]}`, "Accept", "application/x-ndjson")
	var got []byte
	var res runner.Result
	sc := bufio.NewScanner(rec.Body)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var ev struct {
			outEvent
			Result runner.Result `json:"result"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case "stdout":
			b, _ := base64.StdEncoding.DecodeString(ev.DataB64)
			got = append(got, b...)
		case "exit":
			res = ev.Result
		default:
			t.Fatalf("event %s", sc.Bytes())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, out) {
		t.Errorf("the client got %d bytes of %d", len(got), total)
	}
	st := res.Stdout
	if len(st.Head) > execResultBytes || !bytes.Equal(st.Head, out[:len(st.Head)]) || !st.Truncated || st.Bytes != total ||
		st.SHA256 != hex.EncodeToString(sum[:]) || !bytes.Equal(st.Tail, out[total-len(st.Tail):]) || len(st.Tail) == 0 {
		t.Errorf("streamed Result: %d head and %d tail bytes of %d, truncated %v, sha256 %s", len(st.Head), len(st.Tail), st.Bytes, st.Truncated, st.SHA256)
	}
	rec = do(t, s.Handler(), false, "POST", "/v1/sandboxes/"+liveID+"/exec", `{"argv":["x"]}`, "Accept", "application/json")
	if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if st := res.Stdout; !bytes.Equal(st.Head, out) || st.Truncated || st.Bytes != total {
		t.Errorf("plain Result: %d head bytes of %d, truncated %v", len(st.Head), st.Bytes, st.Truncated)
	}
	s.inflight.Wait()
}

// TestNDJSONReaderStops: a client that stops reading an NDJSON exec
// leaves the server holding at most the window, the program waiting on
// its writes; the exec still ends at its timeout, or when the client
// hangs up.
func TestNDJSONReaderStops(t *testing.T) {
	defer func(d time.Duration) { execGrace = d }(execGrace)
	execGrace = 100 * time.Millisecond
	for _, c := range []struct {
		name, timeout string
		want          runner.Reason
	}{
		{"timeout", "1s", runner.ReasonTimeout},
		{"hang-up", "", runner.ReasonKilled},
	} {
		t.Run(c.name, func(t *testing.T) {
			const total = 256 << 20
			var written atomic.Int64
			execDone := make(chan engine.Exit, 1)
			s, _, _ := liveServer(t, runner.Ceilings{}, 1<<30, func(ctx context.Context, p *engine.Process) (engine.Exit, error) {
				// As an engine: a copy of the output, a timer, and a
				// kill that waits for the copy to drain.
				var killed atomic.Bool
				copied := make(chan struct{})
				go func() {
					defer close(copied)
					chunk := bytes.Repeat([]byte("w"), 32<<10)
					for written.Load() < total && !killed.Load() {
						p.Stdout.Write(chunk)
						written.Add(int64(len(chunk)))
					}
				}()
				var x engine.Exit
				select {
				case <-copied:
				case <-time.After(p.Timeout):
					x.TimedOut = true
				case <-ctx.Done():
					x.Killed = true
				}
				killed.Store(true)
				<-copied
				execDone <- x
				return x, nil
			})
			hs := httptest.NewServer(s.Handler())
			defer hs.Close()
			cn, err := net.Dial("tcp", hs.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer cn.Close()
			cn.(*net.TCPConn).SetReadBuffer(4096)
			body := `{"argv":["x"]}`
			if c.timeout != "" {
				body = `{"argv":["x"],"timeout":"` + c.timeout + `"}`
			}
			fmt.Fprintf(cn, "POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: x\r\nAccept: application/x-ndjson\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", liveID, len(body), body)
			settled(t, written.Load)
			// What was written is the window, what the connection's
			// buffers took, and the lines being encoded; never the whole.
			if n := written.Load(); n > 32<<20 {
				t.Fatalf("the program wrote %d bytes to a client that reads none", n)
			}
			if c.timeout == "" {
				cn.Close()
			}
			select {
			case x := <-execDone:
				if c.want == runner.ReasonTimeout && !x.TimedOut || c.want == runner.ReasonKilled && !x.Killed {
					t.Errorf("the exec ended %+v, want %s", x, c.want)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("the exec did not end at %s", c.name)
			}
			cn.Close()
			s.inflight.Wait()
		})
	}
}

// waitFor polls cond until it holds, for at most 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: 10s passed", what)
		}
	}
}

// settled polls n until it stays the same for 300ms.
func settled(t *testing.T, n func() int64) {
	t.Helper()
	last, since := n(), time.Now()
	for deadline := time.Now().Add(20 * time.Second); time.Since(since) < 300*time.Millisecond; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still changing after 20s: %d", last)
		}
		if v := n(); v != last {
			last, since = v, time.Now()
		}
	}
}
