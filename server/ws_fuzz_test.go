package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/airlock-sandbox/airlock/runner"
)

// FuzzWSMessages sends a first message and up to eight more, each a
// WebSocket text frame, to the exec WebSocket of a real server over a real
// connection. An exec session (ex-fuzz, with some output) is registered,
// so that a reconnect reaches the message loop; no sandbox is live, so an
// execute ends at its lookup. What the server sends back must be the
// protocol's messages, a reconnect must replay exactly the output past its
// offsets, and no handler may panic.
func FuzzWSMessages(f *testing.F) {
	const sid, eid = "sb-0123456789abcdef0123", "ex-fuzz"
	reconnect := `{"type":"reconnect","exec_id":"ex-fuzz","stdout_offset":2,"stderr_offset":0}`
	for _, c := range [][2]string{
		{reconnect, `{"type":"input","data":"hi"}` + "\n" + `{"type":"input","data_b64":"aGk="}` + "\n" + `{"type":"close_stdin"}` + "\n" + `{"type":"kill"}`},
		{reconnect, `{"type":"input","data_b64":"!"}`},
		{reconnect, `{"type":"close_stdin"}` + "\n" + `{"type":"input","data":"late"}`},
		{reconnect, `{"type":"resize"}`},
		{reconnect, `not json`},
		{`{"type":"reconnect","exec_id":"ex-fuzz","stdout_offset":-1}`, ``},
		{`{"type":"reconnect","exec_id":"ex-fuzz","stderr_offset":99}`, ``},
		{`{"type":"reconnect","exec_id":"ex-other"}`, ``},
		{`{"type":"execute","argv":["ls"],"stdin":true}`, `{"type":"input","data":"x"}`},
		{`{"type":"execute","argv":["ls"],"detach":true}`, ``},
		{`{"type":"execute","argv":[]}`, ``},
		{`{"type":"kill"}`, ``},
		{`{}`, ``},
		{`[]`, ``},
		{``, ``},
	} {
		f.Add(c[0], []byte(c[1]))
	}
	s, eng, _ := newFuzzServer(f)
	hs, panicked := watchedServer(f, s)
	wsURL := "ws" + strings.TrimPrefix(hs.URL, "http") + "/v1/sandboxes/" + sid + "/exec/ws"
	out := [2][]byte{[]byte("stdout bytes"), []byte("err")}

	f.Fuzz(func(t *testing.T, first string, rest []byte) {
		e := keptSession(eid, sid, out)
		e.stdin = newStdinFeed()
		s.execs.add(e)
		defer func() {
			s.execs.forget(e)
			e.stdin.close()
			e.stdin.pr.Close()
		}()
		// A hang is a failure too; the bound is far above any answer.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, _, err := websocket.Dial(ctx, wsURL, nil)
		if err != nil {
			t.Fatalf("dialing: %v", err)
		}
		defer c.CloseNow()
		msgs := [][]byte{[]byte(first)}
		for i, m := range bytes.Split(rest, []byte("\n")) {
			if len(rest) > 0 && i < 8 {
				msgs = append(msgs, m)
			}
		}
		for _, m := range msgs {
			if c.Write(ctx, websocket.MessageText, m) != nil {
				break // the server has closed the connection
			}
		}
		// The exec ends: the server sends the rest of its output and
		// its exit, then closes.
		e.finish(runner.Result{ID: eid, Reason: runner.ReasonExited}, nil)
		var events []map[string]any
		var got [2][]byte
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				if st := websocket.CloseStatus(err); st != websocket.StatusNormalClosure && st != websocket.StatusPolicyViolation {
					t.Fatalf("the connection ended with %v (status %d)", err, st)
				}
				break
			}
			var ev map[string]any
			if err := json.Unmarshal(b, &ev); err != nil {
				t.Fatalf("the server sent a message that is not a JSON object: %q", b)
			}
			events = append(events, ev)
			switch ev["type"] {
			case "started", "exit":
			case "stdout", "stderr":
				i := map[any]int{"stdout": 0, "stderr": 1}[ev["type"]]
				chunk, err := base64.StdEncoding.DecodeString(ev["data_b64"].(string))
				if err != nil {
					t.Fatalf("data_b64: %v", err)
				}
				got[i] = append(got[i], chunk...)
			case "error":
				d, _ := ev["error"].(map[string]any)
				if k := d["kind"]; k != KindInvalidInput && k != KindNotFound {
					t.Fatalf("an error of kind %v: %v", k, d)
				}
			default:
				t.Fatalf("the server sent a message of type %v: %q", ev["type"], b)
			}
		}
		if v := panicked.Load(); v != nil {
			t.Fatalf("the handler panicked: %v", v)
		}
		if len(eng.Checked()) > 0 {
			t.Fatal("a WebSocket message reached the engine's Check")
		}
		// A reconnect that was accepted, and ended with the exec's exit,
		// replayed the output from its offsets.
		var m wsMessage
		if len(events) == 0 || events[0]["type"] != "started" {
			return
		}
		if err := decodeJSON(strings.NewReader(first), &m); err != nil || m.Type != "reconnect" {
			t.Fatalf("started after a first message that is no reconnect: %q (%v)", first, err)
		}
		if events[len(events)-1]["type"] != "exit" {
			return
		}
		for i, off := range [2]int64{m.StdoutOffset, m.StderrOffset} {
			if !bytes.Equal(got[i], out[i][off:]) {
				t.Fatalf("%s from offset %d: %q, want %q", streamNames[i], off, got[i], out[i][off:])
			}
		}
	})
}

// checkServerFrames checks what the server sent: unmasked frames of
// known opcodes, each text frame a JSON object. A last frame may be cut
// short by a reset.
func checkServerFrames(t *testing.T, b []byte) {
	t.Helper()
	for len(b) >= 2 {
		op, masked, n := b[0]&0x0f, b[1]&0x80 != 0, uint64(b[1]&0x7f)
		b = b[2:]
		switch {
		case n == 126 && len(b) >= 2:
			n, b = uint64(binary.BigEndian.Uint16(b)), b[2:]
		case n == 127 && len(b) >= 8:
			n, b = binary.BigEndian.Uint64(b), b[8:]
		}
		if masked || (op != 1 && op != 8 && op != 10) {
			t.Fatalf("the server sent a frame of opcode %d, masked %v", op, masked)
		}
		if uint64(len(b)) < n {
			return
		}
		if op == 1 && !json.Valid(b[:n]) {
			t.Fatalf("the server sent a text frame that is not JSON: %q", b[:n])
		}
		b = b[n:]
	}
}

// wsFrame is a client's frame: masked, as RFC 6455 requires of clients.
func wsFrame(fin bool, op byte, payload []byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	b := []byte{b0}
	switch n := len(payload); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n < 1<<16:
		b = append(b, 0x80|126, byte(n>>8), byte(n))
	default:
		b = append(b, 0x80|127, 0, 0, 0, 0, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	key := [4]byte{1, 2, 3, 4}
	b = append(b, key[:]...)
	for i, c := range payload {
		b = append(b, c^key[i%4])
	}
	return b
}

// FuzzWSFrames writes the bytes, as they are, after the WebSocket
// handshake of a real server's exec WebSocket, then half-closes the
// connection: malformed frames (bad opcodes and lengths, unmasked or
// fragmented frames, control frames out of place) reach the server's
// frame reading and ws.go behind it. The server must not panic, must end
// the connection, and must ask no engine for anything.
func FuzzWSFrames(f *testing.F) {
	const sid = "sb-0123456789abcdef0123"
	reconnect := []byte(`{"type":"reconnect","exec_id":"ex-fuzz"}`)
	execute := []byte(`{"type":"execute","argv":["ls"]}`)
	for _, b := range [][]byte{
		wsFrame(true, 1, reconnect),
		append(wsFrame(true, 1, reconnect), wsFrame(true, 1, []byte(`{"type":"kill"}`))...),
		append(wsFrame(false, 1, reconnect[:10]), wsFrame(true, 0, reconnect[10:])...),
		append(wsFrame(false, 1, reconnect[:10]), append(wsFrame(true, 9, []byte("ping")), wsFrame(true, 0, reconnect[10:])...)...),
		wsFrame(true, 0, reconnect),
		wsFrame(true, 2, execute),
		wsFrame(true, 3, execute),
		wsFrame(true, 8, []byte{3, 232, 'b', 'y', 'e'}),
		wsFrame(false, 9, []byte("fragmented ping")),
		wsFrame(true, 9, bytes.Repeat([]byte("x"), 126)),
		{0x81, 0x05, 'h', 'e', 'l', 'l', 'o'}, // unmasked
		{0x81, 0xff, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4},
		{0x81, 0xfe, 0x00},
		{0xf1, 0x80, 1, 2, 3, 4},
		{},
	} {
		f.Add(b)
	}
	s, eng, _ := newFuzzServer(f)
	hs, panicked := watchedServer(f, s)
	addr := strings.TrimPrefix(hs.URL, "http://")
	handshake := "GET /v1/sandboxes/" + sid + "/exec/ws HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"

	f.Fuzz(func(t *testing.T, raw []byte) {
		// An exec that has ended, so that a reconnect gets its output and
		// exit at once.
		e := keptSession("ex-fuzz", sid, [2][]byte{[]byte("out"), []byte("err")})
		e.finish(runner.Result{ID: "ex-fuzz", Reason: runner.ReasonExited}, nil)
		s.execs.add(e)
		defer s.execs.forget(e)

		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// A hang is a failure too; the bound is far above any answer.
		c.SetDeadline(time.Now().Add(time.Minute))
		if _, err := c.Write([]byte(handshake)); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("the handshake: %v, %v", resp, err)
		}
		c.Write(raw) // the server may have closed already
		c.(*net.TCPConn).CloseWrite()
		var reply bytes.Buffer
		if _, err := io.Copy(&reply, br); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("the server did not end the connection: %v", err)
		}
		checkServerFrames(t, reply.Bytes())
		if v := panicked.Load(); v != nil {
			t.Fatalf("the handler panicked: %v", v)
		}
		if len(eng.Checked()) > 0 {
			t.Fatal("a WebSocket frame reached the engine's Check")
		}
	})
}

// watchedServer serves s over loopback until f ends; panicked holds the
// text of any panic a handler raised (re-raised, so the server logs it).
func watchedServer(f *testing.F, s *Server) (*httptest.Server, *atomic.Value) {
	panicked := new(atomic.Value)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				panicked.Store(fmt.Sprint(v))
				panic(v)
			}
		}()
		s.Handler().ServeHTTP(w, r)
	}))
	f.Cleanup(hs.Close)
	return hs, panicked
}
