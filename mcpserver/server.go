package mcpserver

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/admission"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/templates"
)

// Runners hands the server a runner for each tool call, and the function
// that releases it. The CLI implements it with the same wiring as `airlock
// run` and `airlock exec`: the engine it was told (or auto), and the engine
// a sandbox was made with.
type Runners interface {
	// New returns a runner for new work: a one-shot run or a new sandbox.
	New(ctx context.Context) (*runner.Runner, func(), error)
	// ForSandbox returns a runner on the engine sandbox id was made with.
	ForSandbox(ctx context.Context, id string) (*runner.Runner, func(), error)
	// Template reads the sandbox template named name (templates.Store.Get
	// on airlock's root).
	Template(name string) (*templates.Template, error)
	// ForTemplate returns a runner for new work on template t: on the
	// engine t names, which must agree with the engine the server was
	// told.
	ForTemplate(ctx context.Context, t *templates.Template) (*runner.Runner, func(), error)
}

// Server is airlock's MCP tool server.
type Server struct {
	runners Runners
	log     *slog.Logger
	version string
	gate    *admission.Gate
	mcp     *mcp.Server
}

// Option configures a Server.
type Option func(*Server)

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithVersion sets the version the server reports to clients.
func WithVersion(v string) Option { return func(s *Server) { s.version = v } }

// WithAdmission caps run_code and sandbox_create by gate, the count the
// caller's other faces share (airlock serve's --max-sandboxes); the
// default admits everything.
func WithAdmission(g *admission.Gate) Option { return func(s *Server) { s.gate = g } }

// New returns a Server whose tools run on the runners rs gives.
func New(rs Runners, opts ...Option) *Server {
	s := &Server{runners: rs, log: slog.New(slog.DiscardHandler), version: "dev"}
	for _, o := range opts {
		o(s)
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "airlock", Title: "airlock sandboxes", Version: s.version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       s.log,
	})
	s.addTools()
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
// loopback are refused (DNS rebinding), and bodies are capped.
func (s *Server) HTTPHandler() http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		Logger:              s.log,
		SessionTimeout:      sessionTimeout,
		MaxRequestBodyBytes: maxMessage,
	})
}
