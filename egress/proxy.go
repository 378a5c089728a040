package egress

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Resolver returns the addresses of a host name. The proxy's default is
// the host's resolver (net.DefaultResolver).
type Resolver func(ctx context.Context, host string) ([]netip.Addr, error)

// systemResolver is the host's resolver, asked for rooted names: Go's
// own, reading /etc/hosts and resolv.conf's servers, whatever
// nsswitch.conf says, so that a name is answered alike on every host
// (glibc's never reads /etc/hosts for a rooted name).
func systemResolver(ctx context.Context, host string) ([]netip.Addr, error) {
	return rooted(goResolver.LookupNetIP)(ctx, host)
}

var goResolver = &net.Resolver{PreferGo: true}

// rooted asks lookup for host as a rooted name ("x.example.org."), so
// that the host's search list and ndots never make it another name: the
// address dialled is the allowed name's own, or there is none.
func rooted(lookup func(ctx context.Context, network, host string) ([]netip.Addr, error)) Resolver {
	return func(ctx context.Context, host string) ([]netip.Addr, error) {
		return lookup(ctx, "ip", strings.TrimSuffix(host, ".")+".")
	}
}

// Limits bound one sandbox's egress. A zero field takes its default.
type Limits struct {
	// Bytes caps the bytes through the proxy, both ways, every
	// connection; 1 GiB by default. Past it, connections are cut and new
	// ones refused.
	Bytes int64
	// Conns caps the connections open at once; 32 by default.
	Conns int
	// Idle closes a connection with no byte either way for this long; 60s
	// by default.
	Idle time.Duration
	// HeaderTimeout bounds reading a request's header; 10s by default.
	HeaderTimeout time.Duration
	// DialTimeout bounds resolving, connecting and a route's TLS
	// handshake; 10s by default.
	DialTimeout time.Duration
	// HeaderBytes caps a request's or a response's header; 32 KiB by
	// default.
	HeaderBytes int
}

// DefaultBytes is the byte cap of a zero Limits.
const DefaultBytes = 1 << 30

// DefaultLimits are the limits of a zero Limits.
var DefaultLimits = Limits{
	Bytes:         DefaultBytes,
	Conns:         32,
	Idle:          60 * time.Second,
	HeaderTimeout: 10 * time.Second,
	DialTimeout:   10 * time.Second,
	HeaderBytes:   32 << 10,
}

func (l Limits) withDefaults() (Limits, error) {
	if l.Bytes < 0 || l.Conns < 0 || l.Idle < 0 || l.HeaderTimeout < 0 || l.DialTimeout < 0 || l.HeaderBytes < 0 {
		return Limits{}, fmt.Errorf("egress limits %+v: a limit is positive, or zero for its default", l)
	}
	d := DefaultLimits
	return Limits{
		Bytes:         cmp.Or(l.Bytes, d.Bytes),
		Conns:         cmp.Or(l.Conns, d.Conns),
		Idle:          cmp.Or(l.Idle, d.Idle),
		HeaderTimeout: cmp.Or(l.HeaderTimeout, d.HeaderTimeout),
		DialTimeout:   cmp.Or(l.DialTimeout, d.DialTimeout),
		HeaderBytes:   cmp.Or(l.HeaderBytes, d.HeaderBytes),
	}, nil
}

// Kinds of Record.
const (
	KindConnect    = "connect"    // a CONNECT tunnel
	KindHTTP       = "http"       // one plain HTTP request forwarded
	KindCredential = "credential" // one request on a credential route
)

// Reasons a connection was refused (Allowed false), or how an allowed one
// ended (Allowed true: the policy let it through and the host was
// dialled). Two are either: ReasonBadRequest and ReasonByteLimit.
const (
	// ReasonBadRequest: the sandbox sent what the proxy does not read.
	// Refused: its request's header (or a DNS packet that is not a
	// query). Allowed: its upload's body (a malformed chunk), read only
	// after the host was dialled; the upload is cut and answered 400.
	ReasonBadRequest = "bad_request"
	// ReasonMethod: refused, TRACE or TRACK.
	ReasonMethod = "method_not_allowed"
	// ReasonHost: refused, the host is not on the allowlist.
	ReasonHost = "host_not_allowed"
	// ReasonPort: refused, the host is on the allowlist but not with
	// this port.
	ReasonPort = "port_not_allowed"
	// ReasonAddress: refused, the name resolved only to addresses the
	// proxy may not dial.
	ReasonAddress = "address_not_allowed"
	// ReasonResolve: refused, the name did not resolve.
	ReasonResolve = "resolve_failed"
	// ReasonConnLimit: refused, the sandbox has its most connections
	// open; its request is not read.
	ReasonConnLimit = "conn_limit"
	// ReasonByteLimit: the sandbox's byte budget. Refused: it was spent
	// before the connection. Allowed: it ran out, and the connection was
	// cut.
	ReasonByteLimit = "byte_limit"
	// ReasonDial: allowed, but connecting to the host failed.
	ReasonDial = "dial_failed"
	// ReasonTLS: allowed (a route), but the host's certificate could not
	// be verified, or TLS failed.
	ReasonTLS = "tls_failed"
	// ReasonUpstream: allowed, and the host failed it: sending it the
	// request failed, or its response's body broke off (a reset, or an
	// end before its length). Never the sandbox's own end.
	ReasonUpstream = "upstream_error"
	// ReasonClosed: allowed, and it ended as a connection ends: a tunnel
	// closed by either side, a response passed whole, or the sandbox
	// closing its connection before an upload's or a response's end.
	ReasonClosed = "closed"
	// ReasonIdle: allowed, and no byte passed either way for the idle
	// timeout.
	ReasonIdle = "idle_timeout"
	// ReasonStopped: allowed, and the proxy stopped (the sandbox ended,
	// or the audit sink failed).
	ReasonStopped = "proxy_stopped"
	// ReasonUpstreamHeader: allowed, and the host's response header
	// could not be read or forwarded (none came, or it was too large or
	// malformed, or too many interim responses, or a switch of
	// protocols).
	ReasonUpstreamHeader = "upstream_bad_response"
)

// Record is one connection of the sandbox through the proxy: a CONNECT
// tunnel, or one forwarded request. It never holds a path, a header or a
// body.
type Record struct {
	Time      time.Time `json:"time"`
	SandboxID string    `json:"sandbox_id"`
	// Kind is KindConnect, KindHTTP or KindCredential; empty for a
	// connection refused before its request was read (conn_limit).
	Kind string `json:"kind"`
	// Host and Port are what the sandbox asked for (empty when its
	// request could not be read).
	Host string `json:"host,omitempty"`
	Port uint16 `json:"port,omitempty"`
	// Addr is the address dialled, or when none could be, the first the
	// name resolved to.
	Addr netip.Addr `json:"addr,omitzero"`
	// BytesUp went from the sandbox to the host, BytesDown back: what
	// the upstream connection carried, each byte taken from the budget.
	// For a forwarded request, the request's and the response's headers
	// count too (and a route's TLS); for a tunnel, the CONNECT and its
	// 200 do not.
	BytesUp   int64 `json:"bytes_up"`
	BytesDown int64 `json:"bytes_down"`
	Allowed   bool  `json:"allowed"`
	// Reason is why a connection was refused, or how an allowed one
	// ended.
	Reason string `json:"reason"`
	// Status is the upstream's HTTP status, for forwarded requests.
	Status   int           `json:"status,omitempty"`
	Duration time.Duration `json:"duration_ns"`
	// Suppressed counts the refusals not written before this record,
	// because they came faster than the proxy writes them (see
	// refusedBurst); they are in the proxy's Totals all the same.
	Suppressed int64 `json:"suppressed,omitempty"`
}

// Event is r as an event of airlock's audit log (lifecycle.Audit.Append,
// which adds the time it is written): "event" is "egress", "started" the
// connection's start, and the other keys are r's JSON names.
func (r Record) Event() map[string]any {
	ev := map[string]any{
		"event": "egress", "started": r.Time.UTC().Format(time.RFC3339Nano), "sandbox_id": r.SandboxID,
		"kind": r.Kind, "host": r.Host, "port": r.Port, "bytes_up": r.BytesUp, "bytes_down": r.BytesDown,
		"allowed": r.Allowed, "reason": r.Reason, "duration_ns": int64(r.Duration),
	}
	if r.Addr.IsValid() {
		ev["addr"] = r.Addr.String()
	}
	if r.Status != 0 {
		ev["status"] = r.Status
	}
	if r.Suppressed != 0 {
		ev["suppressed"] = r.Suppressed
	}
	return ev
}

// Stats are a proxy's totals so far.
type Stats struct {
	// Bytes is the bytes taken from the budget, both ways.
	Bytes int64
	// Open is the connections open now.
	Open int
	// Totals are the records given to the audit sink so far.
	Totals Totals
}

// Totals sum a sandbox's audit records: one connection, forwarded
// request or DNS query each.
type Totals struct {
	// Allowed and Refused count records by their Allowed.
	Allowed int64 `json:"allowed"`
	Refused int64 `json:"refused"`
	// BytesUp went from the sandbox to its hosts, BytesDown back, over
	// the records so far.
	BytesUp   int64 `json:"bytes_up"`
	BytesDown int64 `json:"bytes_down"`
}

// Option configures a Proxy.
type Option func(*Proxy)

// WithResolver replaces the host's resolver.
func WithResolver(r Resolver) Option { return func(p *Proxy) { p.resolve = r } }

// WithRoutes adds credential routes, at most one per host and header.
func WithRoutes(rs ...Route) Option {
	return func(p *Proxy) { p.routeList = append(p.routeList, rs...) }
}

// WithRootCAs verifies routes' hosts against pool instead of the host's
// roots.
func WithRootCAs(pool *x509.CertPool) Option { return func(p *Proxy) { p.roots = pool } }

// WithLimits sets the sandbox's limits; zero fields keep their defaults.
func WithLimits(l Limits) Option { return func(p *Proxy) { p.limits = l } }

// WithLogger logs the proxy's own failures (never a request's contents).
func WithLogger(l *slog.Logger) Option { return func(p *Proxy) { p.log = l } }

// Proxy is one sandbox's egress proxy.
type Proxy struct {
	id        string
	allow     Allowlist
	audit     func(Record) error
	resolve   Resolver
	routeList []Route
	routes    map[string][]Route
	roots     *x509.CertPool
	limits    Limits
	log       *slog.Logger

	// local are the host's own addresses: public ones are not dialled
	// unless listed, so an allowed name cannot lead to the host's own
	// services.
	local map[netip.Addr]bool

	budget  budget
	slots   chan struct{}
	serving atomic.Bool

	// stopMu guards stopped (Serve's cancel, once it runs) and auditErr
	// (the sink's first failure, which stops a Serve begun after it).
	stopMu   sync.Mutex
	stopped  context.CancelCauseFunc
	auditErr error

	auditOnce sync.Once
	refusals  sampler

	allowed, refused, up, down atomic.Int64
}

// auditFailed is the cause a failed audit sink stops the proxy with.
type auditFailed struct{ err error }

func (a auditFailed) Error() string { return a.err.Error() }

// New makes the proxy of sandbox id, which may reach what allow allows and
// its routes. audit receives one Record per connection; when it fails,
// the proxy stops, and Serve returns its error.
func New(id string, allow Allowlist, audit func(Record) error, opts ...Option) (*Proxy, error) {
	if audit == nil {
		return nil, errors.New("an egress proxy needs an audit sink: every connection is recorded")
	}
	p := &Proxy{id: id, allow: allow, audit: audit}
	for _, o := range opts {
		o(p)
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.resolve == nil {
		p.resolve = systemResolver
	}
	var err error
	if p.limits, err = p.limits.withDefaults(); err != nil {
		return nil, err
	}
	if p.local, err = localAddrs(); err != nil {
		return nil, fmt.Errorf("reading the host's addresses: %w", err)
	}
	p.budget.max = p.limits.Bytes
	p.slots = make(chan struct{}, p.limits.Conns)
	p.routes = map[string][]Route{}
	for _, r := range p.routeList {
		if r.Host == "" || r.Header == "" || r.value == "" || r.Port == 0 {
			return nil, fmt.Errorf("route %s: load it with Credential.Load", r)
		}
		for _, o := range p.routes[r.Host] {
			if o.Header == r.Header {
				return nil, refuse(credentialField, r.Host+"="+r.Header, "this host and header are given twice; give each once")
			}
			if o.Port != r.Port {
				return nil, refuse(credentialField, r.Host+"="+r.Header, "routes to one host must use one port")
			}
		}
		p.routes[r.Host] = append(p.routes[r.Host], r)
	}
	return p, nil
}

func localAddrs() (map[netip.Addr]bool, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	local := map[netip.Addr]bool{}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				local[ip.Unmap()] = true
			}
		}
	}
	return local, nil
}

// Stats are p's totals so far.
func (p *Proxy) Stats() Stats {
	return Stats{Bytes: p.budget.used.Load(), Open: len(p.slots), Totals: Totals{
		Allowed: p.allowed.Load(), Refused: p.refused.Load(), BytesUp: p.up.Load(), BytesDown: p.down.Load(),
	}}
}

// Serve answers the sandbox's connections on ln until ctx is done or the
// audit sink fails, then closes ln and every connection, and returns once
// all are closed. An accept error that persists for about two seconds
// ends it too, with that error. A Proxy serves once.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) (err error) {
	if !p.serving.CompareAndSwap(false, true) {
		return errors.New("this egress proxy is already serving: make one per listener")
	}
	// On return, every connection is closed (cancel) before the wait for
	// their handlers; then the count of refusals not written is.
	defer func() {
		if ferr := p.flushRefusals(); ferr != nil && err == nil {
			err = fmt.Errorf("writing sandbox %q's egress audit: %w", p.id, ferr)
		}
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	p.stopMu.Lock()
	p.stopped = cancel
	if p.auditErr != nil {
		cancel(auditFailed{p.auditErr})
	}
	p.stopMu.Unlock()
	defer context.AfterFunc(ctx, func() { ln.Close() })()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil && ctx.Err() == nil && !errors.Is(err, net.ErrClosed) && backoff < time.Second {
			// Out of descriptors, or a connection reset before it was
			// accepted: wait a little and go on.
			backoff = max(2*backoff, 5*time.Millisecond)
			p.log.Warn("accepting an egress connection", "sandbox_id", p.id, "err", err)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
			}
			continue
		}
		if err != nil {
			ln.Close()
			var af auditFailed
			if errors.As(context.Cause(ctx), &af) {
				return fmt.Errorf("writing sandbox %q's egress audit: %w", p.id, af.err)
			}
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accepting sandbox %q's egress connections: %w", p.id, err)
		}
		backoff = 0
		select {
		case p.slots <- struct{}{}:
		default:
			p.refuseConn(c)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-p.slots }()
			p.handle(ctx, c)
		}()
	}
}

// refuseConn answers a connection past the cap without reading from it.
func (p *Proxy) refuseConn(c net.Conn) {
	defer c.Close()
	start := time.Now()
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	writeRefusal(c, 503, ReasonConnLimit, fmt.Sprintf("this sandbox has %d connections open, its limit", p.limits.Conns))
	p.record(Record{Time: start, Reason: ReasonConnLimit})
}

// record fills in r's sandbox and duration and hands it to the audit sink;
// a sink's failure stops the proxy.
func (p *Proxy) record(r Record) {
	r.SandboxID = p.id
	r.Duration = time.Since(r.Time)
	if r.Allowed {
		p.allowed.Add(1)
	} else {
		p.refused.Add(1)
	}
	p.up.Add(r.BytesUp)
	p.down.Add(r.BytesDown)
	if sampled(r) {
		write, skipped := p.refusals.take(time.Now())
		if !write {
			return
		}
		r.Suppressed = skipped
	}
	p.write(r)
}

// sampled says whether r is written as the sampler allows: a refusal, or
// an allowed connection that moved no byte either way, however it ended
// (it cost no budget, so no limit bounds how often a sandbox may make one).
func sampled(r Record) bool {
	return !r.Allowed || r.BytesUp == 0 && r.BytesDown == 0
}

// flushRefusals writes the count of refusals left out and not yet
// reported, if any, and returns the sink's error.
func (p *Proxy) flushRefusals() error {
	if n := p.refusals.drain(); n > 0 {
		return p.write(Record{Time: time.Now(), SandboxID: p.id, Reason: ReasonSuppressed, Suppressed: n})
	}
	return nil
}

// write hands r to the audit sink; a sink's failure stops the proxy, now
// or as its Serve begins.
func (p *Proxy) write(r Record) error {
	err := p.audit(r)
	if err != nil {
		p.auditOnce.Do(func() {
			p.log.Error("egress audit failed: stopping the proxy", "sandbox_id", p.id, "err", err)
			p.stopMu.Lock()
			p.auditErr = err
			stop := p.stopped
			p.stopMu.Unlock()
			if stop != nil {
				stop(auditFailed{err})
			}
		})
	}
	return err
}
