package mcpserver

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/admission"
	"github.com/airlock-sandbox/airlock/errkind"
)

// DefaultMaxSessions is the default cap on MCP sessions open at once over
// streamable HTTP. A session costs a few KiB and a goroutine while it
// lives (until its client closes it or it idles for the session timeout),
// so the cap only stops a client that opens sessions without end.
const DefaultMaxSessions = 1024

// SessionsError refuses a new MCP session past the cap. It is
// errdefs.IsResourceExhausted: errkind's over_limit, 429 over HTTP.
type SessionsError struct {
	Open, Max   int
	IdleTimeout time.Duration
}

func (e *SessionsError) Error() string {
	open := fmt.Sprintf("%d MCP sessions are", e.Open)
	if e.Open == 1 {
		open = "1 MCP session is"
	}
	return fmt.Sprintf("%s open, the most this server allows (--max-mcp-sessions %d); close sessions no longer used (an MCP client's close sends DELETE /mcp; an idle session closes by itself after %v), or raise airlock serve's --max-mcp-sessions, then connect again", open, e.Max, e.IdleTimeout)
}

// ResourceExhausted classifies the error for errdefs.
func (*SessionsError) ResourceExhausted() {}

// sessionGate caps the server's streamable HTTP sessions. The count of
// open ones is read from the SDK's own list of the server's sessions, so a
// session ended in any way, DELETE or the SDK's idle timeout, frees its
// slot with no bookkeeping here. It counts the sessions with a session ID
// (stdio and in-memory ones have none) that have been initialized: the
// SDK closes a session whose first request was no initialize (the Go
// client's server/discover probe, say) as that request ends, just after
// it answers, and a client that saw the answer must not find it counted.
// pending counts the admitted requests that have not answered yet, whose
// sessions the count may not show yet.
type sessionGate struct {
	srv     *mcp.Server
	max     int
	timeout time.Duration
	log     *slog.Logger

	mu      sync.Mutex
	pending int
	full    bool // the last new session was refused; logged once per spell
}

// open counts the server's initialized sessions over streamable HTTP.
func (g *sessionGate) open() int {
	n := 0
	for ss := range g.srv.Sessions() {
		if ss.ID() != "" && ss.InitializeParams() != nil {
			n++
		}
	}
	return n
}

// admit reserves room for one more session; release gives it back, and
// may be called more than once.
func (g *sessionGate) admit() (release func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if n := g.open(); n+g.pending >= g.max {
		if !g.full {
			g.log.Warn("MCP sessions at their cap; new ones are refused until some close (airlock serve --max-mcp-sessions)", "open", n, "max", g.max)
		}
		g.full = true
		return nil, &SessionsError{Open: n, Max: g.max, IdleTimeout: g.timeout}
	}
	g.full = false
	return admission.Reserve(&g.mu, &g.pending), nil
}

// wrap gates next's requests that open a session: in the SDK's stateful
// handler that is every POST without an Mcp-Session-Id header (one whose
// initialize fails is closed again as it ends). Requests on an existing
// session pass untouched.
func (g *sessionGate) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" {
			next.ServeHTTP(w, r)
			return
		}
		release, err := g.admit()
		if err != nil {
			writeError(w, err)
			return
		}
		defer release()
		next.ServeHTTP(&admitted{ResponseWriter: w, release: release}, r)
	})
}

// admitted is an admitted request's ResponseWriter. Its first write gives
// back the reservation: the SDK initializes a session before it answers
// its initialize, so from then on open counts it, and a client that saw
// the answer and opens the next session is never counted twice. (A batch
// of the old protocol, 2025-03-26, that puts initialize after another
// request answers first: its session is counted by neither for the
// moment between, which concurrent requests could use to pass the cap by
// a few. Nothing leaks: the count is the SDK's.)
type admitted struct {
	http.ResponseWriter
	release func()
}

func (a *admitted) WriteHeader(code int) {
	a.release()
	a.ResponseWriter.WriteHeader(code)
}

func (a *admitted) Write(b []byte) (int, error) {
	a.release()
	return a.ResponseWriter.Write(b)
}

func (a *admitted) Flush() {
	a.release()
	_ = http.NewResponseController(a.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (a *admitted) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// errorBody is airlock serve's one error shape (server.ErrorBody), for the
// refusals this face makes before the SDK's transport sees a request.
type errorBody struct {
	Error struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
	} `json:"error"`
}

// writeError answers with the error shape and the status of err's kind in
// errkind's table.
func writeError(w http.ResponseWriter, err error) {
	row := errkind.RowOf(err)
	var body errorBody
	body.Error.Kind, body.Error.Message = string(row.Kind), err.Error()
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(row.Status)
	w.Write(append(b, '\n'))
}
