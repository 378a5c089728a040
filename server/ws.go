package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// wsMessage is any message a WebSocket client sends.
type wsMessage struct {
	Type string `json:"type"`
	// input
	Data    *string `json:"data,omitempty"`
	DataB64 string  `json:"data_b64,omitempty"`
	// reconnect
	ExecID       string `json:"exec_id,omitempty"`
	StdoutOffset int64  `json:"stdout_offset,omitempty"`
	StderrOffset int64  `json:"stderr_offset,omitempty"`
}

// wsMessageLimit caps each client message after the first (execute or
// reconnect, capped by MaxBody): input is sent in pieces of at most this.
const wsMessageLimit = 1 << 20

type startedEvent struct {
	Type            string `json:"type"`
	ExecID          string `json:"exec_id"`
	MaxMessageBytes int    `json:"max_message_bytes"`
}

// execWS is the exec WebSocket: execute (or reconnect), then input,
// close_stdin and kill from the client; started, stdout, stderr and exit
// from the server.
func (s *Server) execWS(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		// Accept would answer 426 in plain text.
		writeError(w, invalid("GET %s is a WebSocket: open it with an Upgrade: websocket request (docs/api.md), or POST …/exec for one exec", r.URL.Path))
		return
	}
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept answered the client
	}
	defer conn.CloseNow()
	conn.SetReadLimit(s.opt.MaxBody)
	// ctx ends when the client's messages do, so that a refused message
	// ends the output too.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	send := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return conn.Write(wctx, websocket.MessageText, b)
	}
	fail := func(err error) {
		send(errorEvent{Type: "error", Error: errorDetail(err)})
		conn.Close(websocket.StatusPolicyViolation, truncate(err.Error(), 120))
	}

	// The first message says what to do.
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	_, first, err := conn.Read(rctx)
	cancel()
	if err != nil {
		return
	}
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(first, &head); err != nil {
		fail(invalid("a message must be a JSON object with a type: execute or reconnect first"))
		return
	}
	var e *execSession
	var rd *execReader
	switch head.Type {
	case "execute":
		var q ExecRequest
		if err := decodeJSON(bytesReader(first), &q); err != nil {
			fail(err)
			return
		}
		if q.Detach {
			fail(invalid("detach is for POST /v1/sandboxes/{id}/exec; a WebSocket exec streams its output"))
			return
		}
		spec, err := q.spec()
		if err != nil {
			fail(err)
			return
		}
		sb, done, err := s.svc.Open(ctx, id)
		if err != nil {
			fail(err)
			return
		}
		// The exec runs on the server's lifetime: a dropped connection
		// leaves it running for a reconnect.
		if e, err = s.startExec(s.base, sb, done, spec, q.Stdin, faceKept); err != nil {
			fail(err)
			return
		}
		if rd, err = e.attach([2]int64{}); err != nil {
			fail(err)
			return
		}
	case "reconnect":
		var m wsMessage
		if err := decodeJSON(bytesReader(first), &m); err != nil {
			fail(err)
			return
		}
		if e = s.execs.get(m.ExecID); e == nil || e.sandboxID != id {
			fail(newError(KindNotFound, fmt.Sprintf("exec %q is not known in sandbox %q: it ended more than %v ago, or another server ran it", m.ExecID, id, execKeep)))
			return
		}
		// An offset older than the exec keeps is not_found, as an exec
		// no longer kept is.
		if rd, err = e.attach([2]int64{m.StdoutOffset, m.StderrOffset}); err != nil {
			fail(err)
			return
		}
	default:
		fail(invalid("the first message must be execute or reconnect, not %q", head.Type))
		return
	}
	// Detached, the exec keeps only its retention: with no client, it
	// waits once its window is full, for up to execUnread, then keeps its
	// newest bytes.
	defer rd.detach()
	if err := send(startedEvent{Type: "started", ExecID: e.id, MaxMessageBytes: wsMessageLimit}); err != nil {
		return
	}

	// Client messages, while the output is sent. Each is read whole, up to
	// wsMessageLimit; a full stdin queue stops the reading (see stdinFeed).
	conn.SetReadLimit(wsMessageLimit + 1) // never reached: the limit below comes first
	go func() {
		defer cancel()
		for {
			_, rd, err := conn.Reader(ctx)
			if err != nil {
				return
			}
			b, err := io.ReadAll(io.LimitReader(rd, wsMessageLimit+1))
			if err != nil {
				return
			}
			if len(b) > wsMessageLimit {
				send(errorEvent{Type: "error", Error: errorDetail(invalid("a message of more than %d bytes: after execute, each message may be at most %d bytes (max_message_bytes in started); split the input into several input messages", wsMessageLimit, wsMessageLimit))})
				conn.Close(websocket.StatusMessageTooBig, "message above max_message_bytes")
				return
			}
			var m wsMessage
			if err := decodeJSON(bytesReader(b), &m); err != nil {
				fail(err)
				return
			}
			switch m.Type {
			case "input":
				if e.stdin == nil {
					fail(invalid("this exec has no stdin: send execute with \"stdin\": true to feed it input messages"))
					return
				}
				data := []byte(m.DataB64)
				if m.Data != nil {
					data = []byte(*m.Data)
				} else if data, err = base64.StdEncoding.DecodeString(m.DataB64); err != nil {
					fail(invalid("input data_b64 is not base64: %v", err))
					return
				}
				if e.stdin.send(ctx, data) != nil {
					return
				}
			case "close_stdin":
				if e.stdin != nil {
					e.stdin.close()
				}
			case "kill":
				e.kill()
			default:
				fail(invalid("unknown message type %q: send input, close_stdin or kill", m.Type))
				return
			}
		}
	}()
	if err := pump(ctx, rd, true, send); err != nil {
		if !errors.Is(err, context.Canceled) {
			conn.Close(websocket.StatusInternalError, "")
		}
		return
	}
	conn.Close(websocket.StatusNormalClosure, "")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
