package mcpserver

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/service"
)

// Server is airlock's MCP tool server.
type Server struct {
	svc     *service.Service
	log     *slog.Logger
	version string
	mcp     *mcp.Server
	// maxSessions caps the sessions open at once over streamable HTTP;
	// sessionTimeout closes one idle that long.
	maxSessions    int
	sessionTimeout time.Duration
	gate           *sessionGate
}

// Option configures a Server.
type Option func(*Server)

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithVersion sets the version the server reports to clients.
func WithVersion(v string) Option { return func(s *Server) { s.version = v } }

// WithMaxSessions caps the sessions open at once over streamable HTTP
// (HTTPHandler); past it a new session is refused as over_limit (429)
// until one closes. The default is DefaultMaxSessions; below 1, every new
// session is refused. Sessions over stdio or a caller's own transport do
// not count.
func WithMaxSessions(n int) Option { return func(s *Server) { s.maxSessions = n } }

// New returns a Server whose tools work through svc: its engines, its
// admission (run_code and sandbox_create count against airlock serve's
// --max-sandboxes with every other face), its templates.
func New(svc *service.Service, opts ...Option) *Server {
	s := &Server{svc: svc, log: slog.New(slog.DiscardHandler), version: "dev", maxSessions: DefaultMaxSessions, sessionTimeout: sessionTimeout}
	for _, o := range opts {
		o(s)
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "airlock", Title: "airlock sandboxes", Version: s.version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       s.log,
	})
	s.addTools()
	s.mcp.AddReceivingMiddleware(nullArgs)
	s.gate = &sessionGate{srv: s.mcp, max: s.maxSessions, timeout: s.sessionTimeout, log: s.log}
	return s
}

const instructions = `airlock runs code in isolated sandboxes: no network, no capabilities, a read-only root, hard limits on time, memory, processes and output.
run_code runs a snippet once in a fresh sandbox. For work across several steps, sandbox_create makes a sandbox whose workspace /home/user persists between sandbox_exec calls; move files with sandbox_write_file and sandbox_read_file, and end it with sandbox_destroy (it also ends by itself after its idle timeout or TTL).`

// MCP is the underlying SDK server, for transports of the caller's own.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// ServeStdio serves one client over stdin and stdout until it disconnects
// or ctx ends. Nothing else may write to stdout meanwhile.
func (s *Server) ServeStdio(ctx context.Context) error {
	return s.mcp.Run(ctx, &mcp.StdioTransport{MaxLineLength: maxMessage})
}

// maxMessage bounds one inbound message: a file of MaxFileBytes as base64,
// with room for the rest of the call.
const maxMessage = MaxFileBytes/3*4 + 1<<20

// sessionTimeout closes an HTTP session no request has used for this
// long; sandboxes do not depend on sessions, and keep their own deadlines.
const sessionTimeout = 30 * time.Minute

// HTTPHandler serves the streamable HTTP transport. It does no
// authentication: mount it behind the caller's (airlock serve's bearer
// token). Requests arriving on a loopback address with a Host that is not
// loopback are refused (DNS rebinding), and bodies are capped, in bytes
// and in JSON values (boundValues). A request
// that would open a session past WithMaxSessions is refused with 429 and
// airlock's error shape (kind over_limit); requests on open sessions
// always pass. Every handler of one Server shares its cap.
func (s *Server) HTTPHandler() http.Handler {
	return boundValues(s.gate.wrap(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		Logger:              s.log,
		SessionTimeout:      s.sessionTimeout,
		MaxRequestBodyBytes: maxMessage,
		// A client that hangs up ends its call, and so its sandbox_exec
		// (protocol 2026-07-28 on; before it, an abandoned exec runs to
		// its timeout and counts against the service's --max-execs).
		PropagateRequestCancellation: true,
	})))
}
