package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
)

// wsEvent is any event the exec WebSocket sends.
type wsEvent struct {
	Type    string       `json:"type"`
	ExecID  string       `json:"exec_id"`
	Data    *string      `json:"data"`
	DataB64 string       `json:"data_b64"`
	Offset  int64        `json:"offset"`
	Error   *ErrorDetail `json:"error"`
	size    int
}

// wsExec opens the exec WebSocket of liveID on hs, sends first and
// returns the connection and its first event.
func wsExec(t *testing.T, url, first string) (*websocket.Conn, wsEvent) {
	t.Helper()
	c, _, err := websocket.Dial(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(1 << 26)
	if err := c.Write(context.Background(), websocket.MessageText, []byte(first)); err != nil {
		t.Fatal(err)
	}
	return c, readEvent(t, c)
}

func readEvent(t *testing.T, c *websocket.Conn) wsEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("reading an event: %v", err)
	}
	var ev wsEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("event %.200s: %v", b, err)
	}
	ev.size = len(b)
	return ev
}

func wsURL(hsURL string) string {
	return "ws" + strings.TrimPrefix(hsURL, "http") + "/v1/sandboxes/" + liveID + "/exec/ws"
}

// TestExecCaps: execs whose clients left count until they end; past
// --max-execs, or a sandbox's own cap, an exec on every face is refused
// as over_limit naming the cap, and admitted again once one ends.
func TestExecCaps(t *testing.T) {
	for _, c := range []struct {
		name          string
		max, per, run int
		want          string
	}{
		{"server", 2, 64, 2, "--max-execs 2"},
		{"sandbox", 100, 1, 1, "at once (1)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			release := make(chan struct{})
			s, _, _ := liveServerWith(t, runner.Ceilings{}, 1<<20, func(ctx context.Context, p *engine.Process) (engine.Exit, error) {
				select {
				case <-release:
				case <-ctx.Done():
				case <-time.After(5 * time.Second): // an exec let past the cap would hang the test
				}
				return engine.Exit{}, nil
			}, Options{}, service.WithExecLimits(c.max, c.per))
			hs := liveHTTP(t, s)
			for range c.run {
				conn, ev := wsExec(t, wsURL(hs), `{"type":"execute","argv":["x"]}`)
				if ev.Type != "started" {
					t.Fatalf("exec refused below the cap: %+v", ev)
				}
				conn.CloseNow() // the client leaves; the exec runs on
			}
			for _, accept := range []string{"application/json", "application/x-ndjson"} {
				rec := do(t, s.Handler(), false, "POST", "/v1/sandboxes/"+liveID+"/exec", `{"argv":["x"]}`, "Accept", accept)
				if e := errorOf(t, rec); rec.Code != 429 || e.Kind != KindOverLimit || !strings.Contains(e.Message, c.want) {
					t.Errorf("POST exec (%s) past the cap: %d %+v, want 429 over_limit naming %q", accept, rec.Code, e, c.want)
				}
			}
			conn, ev := wsExec(t, wsURL(hs), `{"type":"execute","argv":["x"]}`)
			conn.CloseNow()
			if ev.Type != "error" || ev.Error.Kind != KindOverLimit || !strings.Contains(ev.Error.Message, c.want) {
				t.Errorf("WebSocket exec past the cap: %+v, want over_limit naming %q", ev, c.want)
			}
			close(release)
			s.inflight.Wait()
			if rec := do(t, s.Handler(), false, "POST", "/v1/sandboxes/"+liveID+"/exec", `{"argv":["x"]}`); rec.Code != 200 {
				t.Errorf("POST exec once the others ended: %d %s", rec.Code, rec.Body)
			}
		})
	}
}

// TestExecBuffer: a WebSocket exec reserves its most (execReserve)
// under --max-exec-buffer when it is admitted, so that the output the
// execs in progress may hold never passes it; ended execs count what they
// hold, which goes oldest first for a new exec's room. A new exec that
// does not fit even so is refused, naming the flag and how many fit, and
// drops nothing.
func TestExecBuffer(t *testing.T) {
	const big = 600 << 10
	const max = 2*execReserve + 1<<20
	release := make(chan struct{})
	s, _, _ := liveServerWith(t, runner.Ceilings{}, 8<<20, func(ctx context.Context, p *engine.Process) (engine.Exit, error) {
		switch p.Argv[0] {
		case "big":
			p.Stdout.Write(bytes.Repeat([]byte("x"), big))
		case "hold":
			p.Stdout.Write(bytes.Repeat([]byte("x"), 2<<20))
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return engine.Exit{}, nil
	}, Options{MaxExecBuffer: max})
	hs := liveHTTP(t, s)
	kept := func() int64 {
		s.execs.mu.Lock()
		defer s.execs.mu.Unlock()
		return s.execs.total
	}
	var ids []string
	for range 3 {
		conn, ev := wsExec(t, wsURL(hs), `{"type":"execute","argv":["big"]}`)
		if ev.Type != "started" {
			t.Fatalf("exec refused: %+v", ev)
		}
		ids = append(ids, ev.ExecID)
		for ev.Type != "exit" {
			ev = readEvent(t, conn)
		}
		conn.CloseNow()
	}
	waitFor(t, "the ended execs to count what they hold", func() bool { return kept() == 3*big })
	for range 2 {
		conn, ev := wsExec(t, wsURL(hs), `{"type":"execute","argv":["hold"]}`)
		defer conn.CloseNow()
		if ev.Type != "started" {
			t.Fatalf("exec refused with room for it: %+v", ev)
		}
	}
	// The second needed room: the two oldest ended execs went, not the newest.
	if s.execs.get(ids[0]) != nil || s.execs.get(ids[1]) != nil || s.execs.get(ids[2]) == nil {
		t.Errorf("ended execs kept %v %v %v, want only the newest", s.execs.get(ids[0]) != nil, s.execs.get(ids[1]) != nil, s.execs.get(ids[2]) != nil)
	}
	if n := kept(); n != 2*execReserve+big {
		t.Errorf("%d bytes counted, want two running execs' most and an ended one's output, %d", n, 2*execReserve+big)
	}
	conn, ev := wsExec(t, wsURL(hs), `{"type":"execute","argv":["big"]}`)
	conn.CloseNow()
	if ev.Type != "error" || ev.Error.Kind != KindOverLimit || !strings.Contains(ev.Error.Message, "--max-exec-buffer") || !strings.Contains(ev.Error.Message, "room for 2 WebSocket execs") {
		t.Errorf("WebSocket exec past the buffer: %+v, want over_limit naming --max-exec-buffer and how many fit", ev)
	}
	if s.execs.get(ids[2]) == nil {
		t.Errorf("a refused exec dropped an ended one's output")
	}
	close(release)
	s.inflight.Wait()
	conn, ev = wsExec(t, wsURL(hs), `{"type":"execute","argv":["x"]}`)
	conn.CloseNow()
	if ev.Type != "started" {
		t.Errorf("WebSocket exec once the others ended: %+v", ev)
	}
	s.inflight.Wait()
	// Once all have ended, each counts what it holds.
	waitFor(t, "the count to be what the execs hold", func() bool {
		s.execs.mu.Lock()
		defer s.execs.mu.Unlock()
		var held int64
		for e := range s.execs.kept {
			held += e.held()
		}
		return held == s.execs.total && s.execs.total <= max
	})
}

// TestWSEventPieces: a WebSocket event carries at most 64 KiB of output,
// cut between UTF-8 sequences, with data only where the piece is valid
// UTF-8; from offset 0 on a reconnect as live.
func TestWSEventPieces(t *testing.T) {
	out := append([]byte("a"+strings.Repeat("é", 70000)), bytes.Repeat([]byte{0xff}, 100)...)
	s, _, _ := liveServer(t, runner.Ceilings{}, 1<<20, func(ctx context.Context, p *engine.Process) (engine.Exit, error) {
		p.Stdout.Write(out)
		return engine.Exit{}, nil
	})
	hs := liveHTTP(t, s)
	conn, ev := wsExec(t, wsURL(hs), `{"type":"execute","argv":["x"]}`)
	id := ev.ExecID
	conn.CloseNow()
	s.inflight.Wait()
	conn, ev = wsExec(t, wsURL(hs), `{"type":"reconnect","exec_id":"`+id+`"}`)
	defer conn.CloseNow()
	if ev.Type != "started" {
		t.Fatalf("reconnect: %+v", ev)
	}
	var got []byte
	var pieces, withData int
	for ev = readEvent(t, conn); ev.Type == "stdout"; ev = readEvent(t, conn) {
		b, err := base64.StdEncoding.DecodeString(ev.DataB64)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 64<<10 || ev.Offset != int64(len(got)) {
			t.Errorf("event of %d bytes at offset %d after %d bytes", len(b), ev.Offset, len(got))
		}
		if ev.Data != nil {
			withData++
			if *ev.Data != string(b) || !utf8.Valid(b) {
				t.Errorf("data differs from data_b64 at offset %d", ev.Offset)
			}
		} else if utf8.Valid(b) {
			t.Errorf("valid UTF-8 at offset %d sent without data", ev.Offset)
		}
		got = append(got, b...)
		pieces++
	}
	if ev.Type != "exit" || !bytes.Equal(got, out) {
		t.Fatalf("got %d bytes then %+v, want %d bytes then exit", len(got), ev, len(out))
	}
	if pieces < 3 || withData < 2 || withData == pieces {
		t.Errorf("%d pieces, %d with data: want the text cut between sequences, each piece with data, and the invalid tail without", pieces, withData)
	}
}

func liveHTTP(t *testing.T, s *Server) string {
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}
