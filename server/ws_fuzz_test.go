package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
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
	var panicked atomic.Value
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
	wsURL := "ws" + strings.TrimPrefix(hs.URL, "http") + "/v1/sandboxes/" + sid + "/exec/ws"
	out := [2][]byte{[]byte("stdout bytes"), []byte("err")}

	f.Fuzz(func(t *testing.T, first string, rest []byte) {
		e := &execSession{id: eid, sandboxID: sid, wake: make(chan struct{}), kill: func() {}, stdin: newStdinFeed()}
		e.out = [2][]byte{bytes.Clone(out[0]), bytes.Clone(out[1])}
		s.execs.add(e)
		defer func() {
			s.execs.forget(eid)
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
