package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/service"
)

// Defaults of Options.
const (
	DefaultMaxSandboxes = 64
	DefaultMaxBody      = 16 << 20
	// DefaultMaxConnections caps the connections of each listener.
	DefaultMaxConnections = 256
	// DefaultMaxSpool is the most all downloads in progress hold on
	// airlock's root: the largest workspace serve takes by default, so
	// that any one file fits when it is alone.
	DefaultMaxSpool = 16 << 30
	// DefaultMaxExecBuffer is the most output WebSocket execs keep, all
	// together, for reconnects.
	DefaultMaxExecBuffer = 512 << 20
	// DefaultReadTimeout bounds the reading of a request, its body
	// included (file uploads extend it). Once the body is read, net/http
	// lifts it: a handler may run long after (an exec's stream, MCP's).
	DefaultReadTimeout = time.Minute
	// DrainTimeout bounds how long a stopping server waits for requests
	// and execs in progress.
	DrainTimeout = 30 * time.Second
	// execKeep is how long an exec's output and Result stay for a
	// WebSocket reconnect after it ended.
	execKeep = 5 * time.Minute
	// sweepEvery is the period of the server's sweep of leftovers.
	sweepEvery = 30 * time.Second
)

// Options configure a Server. Service is required.
type Options struct {
	// Service is what the server serves: its engines, admission, dispatch
	// by sandbox id and destroy. Its engines' runners must last as long as
	// the server (airlock serve keeps one per engine); each is released
	// when the work on it is done.
	Service *service.Service
	// Sweep reaps leftovers every 30s through the service: runs and
	// sandboxes past their deadline or orphaned.
	Sweep bool
	// Token is the bearer token TCP requests must carry.
	Token string
	// MaxBody caps JSON request bodies.
	MaxBody int64
	// ReadTimeout bounds the reading of each request, headers and body,
	// on every route (default DefaultReadTimeout).
	ReadTimeout time.Duration
	// MaxConnections caps the connections open at once on each listener
	// (default DefaultMaxConnections); past it, Accept waits.
	MaxConnections int
	// FetchMaxFiles and FetchMaxBytes cap what one /run_code response
	// carries of fetch_files (defaults DefaultFetchMaxFiles and
	// DefaultFetchMaxBytes); entries past them are left out and named.
	FetchMaxFiles int
	FetchMaxBytes int64
	// MaxSpool caps the bytes all downloads in progress hold in the
	// server's spool at once (default DefaultMaxSpool); a download that
	// would pass it is refused as unavailable.
	MaxSpool int64
	// MaxExecBuffer caps the output bytes all WebSocket execs keep for
	// reconnects at once (default DefaultMaxExecBuffer). Past it the kept
	// output of ended execs is dropped, oldest first, and while that is
	// not enough a new WebSocket exec is refused as over_limit.
	MaxExecBuffer int64
	// Extra mounts more handlers behind the same authentication, by path
	// prefix ("/mcp" serves /mcp and everything below it).
	Extra map[string]http.Handler
	Log   *slog.Logger
}

// Server is airlock's HTTP API.
type Server struct {
	opt     Options
	log     *slog.Logger
	mux     *http.ServeMux
	metrics *metrics
	idem    *idempotency
	// spoolBudget counts what every download's spool file holds.
	spoolBudget *spoolBudget
	execs       *execRegistry

	// base is the server's lifetime: WebSocket execs run on it, so that
	// a dropped connection does not end them.
	base     context.Context
	stop     context.CancelFunc
	inflight sync.WaitGroup

	svc *service.Service
}

// route is one API route; the OpenAPI document lists every one.
type route struct {
	method, path string
	handle       http.HandlerFunc
}

// New returns a Server, with its warm pools filling. Serve frees them.
func New(opt Options) (*Server, error) {
	if opt.Service == nil {
		return nil, errors.New("server: Options.Service is required")
	}
	opt.MaxBody = orDefault(opt.MaxBody, DefaultMaxBody)
	opt.ReadTimeout = orDefault(opt.ReadTimeout, DefaultReadTimeout)
	opt.MaxConnections = orDefault(opt.MaxConnections, DefaultMaxConnections)
	opt.FetchMaxFiles = orDefault(opt.FetchMaxFiles, DefaultFetchMaxFiles)
	opt.FetchMaxBytes = orDefault(opt.FetchMaxBytes, DefaultFetchMaxBytes)
	opt.MaxSpool = orDefault(opt.MaxSpool, DefaultMaxSpool)
	opt.MaxExecBuffer = orDefault(opt.MaxExecBuffer, DefaultMaxExecBuffer)
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{opt: opt, svc: opt.Service, log: opt.Log, mux: http.NewServeMux(), execs: newExecRegistry(opt.MaxExecBuffer), spoolBudget: &spoolBudget{max: opt.MaxSpool}}
	s.base, s.stop = context.WithCancel(context.Background())
	s.metrics = newMetrics(opt.Service.Sandboxes)
	s.idem = newIdempotency(opt.Service.Root())
	for _, rt := range s.routes() {
		s.mux.HandleFunc(rt.method+" "+rt.path, rt.handle)
	}
	// The service's pools start filling now; a pool that cannot be made
	// stops the server before it listens.
	if err := s.svc.StartPools(context.Background()); err != nil {
		return nil, err
	}
	for prefix, h := range opt.Extra {
		prefix = "/" + strings.Trim(prefix, "/")
		s.mux.Handle(prefix, h)
		s.mux.Handle(prefix+"/", h)
	}
	return s, nil
}

// orDefault is v, or def when v is not positive (unset).
func orDefault[T int | int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

func (s *Server) routes() []route {
	return []route{
		{"GET", "/v1/healthz", s.healthz},
		{"GET", "/v1/openapi.json", s.openapi},
		{"GET", "/metrics", func(w http.ResponseWriter, _ *http.Request) { s.metrics.serve(w, s.writePools) }},
		{"POST", "/v1/runs", s.postRun},
		{"POST", "/v1/sandboxes", s.postSandbox},
		{"GET", "/v1/sandboxes", s.listSandboxes},
		{"GET", "/v1/sandboxes/{id}", s.getSandbox},
		{"DELETE", "/v1/sandboxes/{id}", s.deleteSandbox},
		{"POST", "/v1/sandboxes/{id}/pause", s.pauseSandbox},
		{"POST", "/v1/sandboxes/{id}/resume", s.resumeSandbox},
		{"POST", "/v1/sandboxes/{id}/exec", s.postExec},
		{"GET", "/v1/sandboxes/{id}/exec/ws", s.execWS},
		{"PUT", "/v1/sandboxes/{id}/files", s.putFile},
		{"GET", "/v1/sandboxes/{id}/files", s.getFile},
		{"POST", "/v1/sandboxes/{id}/files/read", s.readFiles},
		{"GET", "/v1/ping", s.ping},
		{"POST", "/run_code", s.runCode},
	}
}

// Handler is the API. Requests that came through a TCP listener (see
// Serve) must carry the bearer token; others, from the unix socket, are
// trusted on the socket's permissions.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rest, ok := s.fusionPath(r); ok {
			// SandboxFusion clients give a URL and no headers: the token
			// may be its first path segment, for these routes only.
			r = r.Clone(r.Context())
			r.URL.Path, r.URL.RawPath = rest, ""
			s.route(w, r)
			return
		}
		if viaTCP(r.Context()) && !s.authorized(r) {
			writeError(w, newError(KindUnauthorized, "this request needs `Authorization: Bearer <token>`: the token is in <root>/server/token (or the file given to airlock serve --token-file)"))
			return
		}
		s.route(w, r)
	})
}

// route serves an authorized request: by its route, or in the error shape
// when none takes it.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if _, pattern := s.mux.Handler(r); pattern == "" {
		s.noRoute(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// noRoute answers a request no route takes, in the error shape: a path
// served with other methods is invalid_input (with Allow), any other
// not_found.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{"GET", "POST", "PUT", "DELETE"} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, invalid("%s %s: this path takes %s (see docs/api.md)", r.Method, r.URL.Path, strings.Join(allow, ", ")))
		return
	}
	writeError(w, newError(KindNotFound, fmt.Sprintf("no route %s %s; docs/api.md and /v1/openapi.json list the API", r.Method, r.URL.Path)))
}

// authorized compares the bearer token in constant time.
func (s *Server) authorized(r *http.Request) bool {
	if s.opt.Token == "" {
		return false
	}
	given, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	a, b := sha256.Sum256([]byte(given)), sha256.Sum256([]byte(s.opt.Token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// fusionPath recognises /t/<token>/run_code and /t/<token>/v1/ping, the
// SandboxFusion routes with the token in the URL, and returns the route.
func (s *Server) fusionPath(r *http.Request) (string, bool) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/t/")
	if !ok || s.opt.Token == "" {
		return "", false
	}
	tok, route, ok := strings.Cut(rest, "/")
	if !ok || (route != "run_code" && route != "v1/ping") {
		return "", false
	}
	a, b := sha256.Sum256([]byte(tok)), sha256.Sum256([]byte(s.opt.Token))
	if subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
		return "", false
	}
	return "/" + route, true
}

type tcpKey struct{}

func viaTCP(ctx context.Context) bool { v, _ := ctx.Value(tcpKey{}).(bool); return v }

// WithTCP marks ctx as a TCP connection's, whose requests need the token;
// Serve does this, and tests of Handler can too.
func WithTCP(ctx context.Context) context.Context { return context.WithValue(ctx, tcpKey{}, true) }

// Serve serves the API on every listener until ctx is done, then drains:
// it stops accepting, and waits up to DrainTimeout for the requests and
// execs in progress. A listener whose network is not "unix" needs the
// token. Each listener holds at most MaxConnections connections, and
// every request must be read (headers and body) within ReadTimeout.
func (s *Server) Serve(ctx context.Context, listeners ...net.Listener) error {
	defer s.svc.ClosePools()
	go every(ctx, poolCheckEvery, s.svc.RefreshPools)
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       s.opt.ReadTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if c.LocalAddr().Network() != "unix" {
				return WithTCP(ctx)
			}
			return ctx
		},
	}
	errc := make(chan error, len(listeners))
	for _, l := range listeners {
		l := capConnections(l, s.opt.MaxConnections)
		go func() {
			if err := hs.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serving on %s: %w", l.Addr(), err)
			}
		}()
	}
	if s.opt.Sweep {
		go every(ctx, sweepEvery, s.sweep)
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	s.log.Info("draining")
	dctx, cancel := context.WithTimeout(context.Background(), DrainTimeout)
	defer cancel()
	if serr := hs.Shutdown(dctx); serr != nil {
		s.log.Warn("draining requests", "err", serr)
	}
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-dctx.Done():
		s.log.Warn("draining: execs still running at the deadline; they end by their own timeouts")
	}
	s.stop()
	return err
}

func (s *Server) sweep(ctx context.Context) {
	rep, err := s.opt.Service.Reap(ctx, false)
	if err != nil {
		s.log.Warn("sweeping leftovers", "err", err)
	}
	s.metrics.orphans.Add(uint64(len(rep.Reaped)))
}

// every calls fn every period until ctx is done.
func every(ctx context.Context, period time.Duration, fn func(context.Context)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn(ctx)
		}
	}
}

// body caps and reads a JSON request body into v (within Serve's
// ReadTimeout).
func (s *Server) body(w http.ResponseWriter, r *http.Request, v any) error {
	return decodeJSON(http.MaxBytesReader(w, r.Body, s.opt.MaxBody), v)
}

func readAllCapped(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(w, r.Body, max))
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// openapiDoc is generated from openapi.in.json and the wire types by
// TestOpenAPIGenerated.
//
//go:generate go test -run TestOpenAPIGenerated -update .
//go:embed openapi.json
var openapiDoc []byte

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openapiDoc)
}
