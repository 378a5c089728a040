package oci

// Egress: a sandbox whose policy has egress gets a pair of network
// namespaces of its own (internal/netns), joined by the spec
// (isolation.OCINetwork) and, under gVisor, taken by runsc's network
// stack (--network=sandbox). Its proxy (package egress) serves in the
// proxy's namespace for exactly the sandbox's life: in this process for a
// one-shot sandbox (Run, Hold), in the sandbox's supervisor (Serve) for a
// long-lived one, whose Create returns once the proxy listens. Every
// connection is a record in airlock's audit log; the namespaces go at
// destroy, or with the reaper.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/netns"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/lifecycle"
	"github.com/airlock-sandbox/airlock/units"
)

// egressPort is the proxy's port. Each proxy has a namespace of its own,
// holding its listener alone, so every sandbox's proxy is at the same
// address.
const egressPort = 3128

// dnsPort is where the proxy's namespace answers DNS queries: refused,
// and recorded.
const dnsPort = 53

// proxyWait bounds how long a long-lived sandbox's Create waits for its
// supervisor's proxy to listen.
const proxyWait = 10 * time.Second

// proxyURL is the proxy as the sandbox's HTTP clients are given it.
func proxyURL() string {
	return "http://" + net.JoinHostPort(netns.ProxyAddr, strconv.Itoa(egressPort))
}

// ociNetwork is the network of sandbox id's spec: its namespace and proxy
// for a policy with egress, nil without.
func (e *Engine) ociNetwork(id string, eg isolation.Egress) *isolation.OCINetwork {
	if !eg.On() {
		return nil
	}
	return &isolation.OCINetwork{NetNS: netns.At(e.netnsDir(), id).SandboxPath(), Proxy: proxyURL()}
}

// newProxy makes sandbox id's proxy, which appends a record of every
// connection to airlock's audit log. Credential values are read now, from
// this process's environment or their files.
func (e *Engine) newProxy(id string, eg isolation.Egress) (*egress.Proxy, error) {
	routes := make([]egress.Route, 0, len(eg.Credentials))
	for _, c := range eg.Credentials {
		r, err := c.Load(os.LookupEnv)
		if err != nil {
			return nil, err
		}
		routes = append(routes, r)
	}
	opts := []egress.Option{egress.WithRoutes(routes...), egress.WithLogger(e.log), egress.WithLimits(egress.Limits{Bytes: int64(eg.Bytes)})}
	if e.egressHosts != "" {
		h, err := egress.LoadHosts(e.egressHosts)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
		}
		opts = append(opts, egress.WithResolver(h.Resolver(nil)))
	}
	if e.egressCA != "" {
		pool, err := egress.LoadRoots(e.egressCA)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
		}
		opts = append(opts, egress.WithRootCAs(pool))
	}
	audit := lifecycle.OpenAudit(lifecycle.AuditPath(e.root))
	p, err := egress.New(id, eg.Allow, func(r egress.Record) error { return audit.Append(r.Event()) }, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: making the egress proxy of %q: %w", errdefs.ErrUnavailable, id, err)
	}
	return p, nil
}

// makeNet makes sandbox id's namespaces; on error none is left.
func (e *Engine) makeNet(ctx context.Context, id string) (*netns.Net, error) {
	n, err := netns.Create(ctx, e.netnsDir(), id)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	return n, nil
}

// proxied is a one-shot sandbox's egress, served by this process.
type proxied struct {
	id   string
	dir  string
	p    *egress.Proxy
	stop context.CancelFunc
	done chan error

	haltOnce sync.Once
	totals   egress.Totals
	err      error
}

// serveEgress makes sandbox id's namespaces and serves its proxy there
// until close. On error, nothing it made is left.
func (e *Engine) serveEgress(ctx context.Context, id string, eg isolation.Egress) (*proxied, error) {
	p, err := e.newProxy(id, eg)
	if err != nil {
		return nil, err
	}
	n, err := e.makeNet(ctx, id)
	if err != nil {
		return nil, err
	}
	ln, pc, err := listen(ctx, n)
	if err != nil {
		return nil, errors.Join(err, netns.Remove(e.netnsDir(), id))
	}
	pctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	px := &proxied{id: id, dir: e.netnsDir(), p: p, stop: stop, done: make(chan error, 1)}
	go func() { px.done <- serve(pctx, p, ln, pc) }()
	return px, nil
}

// listen opens the proxy's listeners in n's proxy namespace: TCP for the
// proxy, UDP 53 for DNS queries, which it refuses and records.
func listen(ctx context.Context, n *netns.Net) (net.Listener, net.PacketConn, error) {
	ln, err := n.Listen(ctx, egressPort)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	pc, err := n.ListenPacket(ctx, dnsPort)
	if err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	return ln, pc, nil
}

// serve serves p on ln and its DNS refusals on pc until ctx is done or
// the proxy stops (its audit log failed), and returns once both have.
func serve(ctx context.Context, p *egress.Proxy, ln net.Listener, pc net.PacketConn) error {
	ctx, cancel := context.WithCancel(ctx)
	dns := make(chan error, 1)
	go func() { dns <- p.ServeDNS(ctx, pc) }()
	err := p.Serve(ctx, ln)
	cancel()
	return errors.Join(err, <-dns)
}

// halt stops the proxy, cutting its connections, once, and returns its
// totals and its own failure: an audit log it could not write, which
// stopped it.
func (px *proxied) halt() (egress.Totals, error) {
	px.haltOnce.Do(func() {
		px.stop()
		if err := <-px.done; err != nil {
			px.err = fmt.Errorf("%w: the egress proxy of %q: %w", errdefs.ErrUnavailable, px.id, err)
		}
		px.totals = px.p.Stats().Totals
	})
	return px.totals, px.err
}

// close halts the proxy and removes the namespaces. Its error includes
// the proxy's own failure.
func (px *proxied) close() error {
	_, err := px.halt()
	return errors.Join(err, netns.Remove(px.dir, px.id))
}

// egressState is a long-lived sandbox's egress as its state file keeps it,
// for its supervisor: the allowlist's entries and the credentials'
// sources, never their values.
type egressState struct {
	AllowHost   []string `json:"allow_host"`
	Credentials []string `json:"credentials,omitempty"`
	Bytes       int64    `json:"bytes,omitempty"`
}

func egressStateOf(eg isolation.Egress) *egressState {
	if !eg.On() {
		return nil
	}
	st := &egressState{AllowHost: eg.Allow.Entries(), Bytes: int64(eg.Bytes)}
	for _, c := range eg.Credentials {
		st.Credentials = append(st.Credentials, c.String())
	}
	return st
}

// policy reads st back.
func (st *egressState) policy() (isolation.Egress, error) {
	eg := isolation.Egress{Bytes: units.Bytes(st.Bytes)}
	var err error
	if eg.Allow, err = egress.ParseAllowlist(st.AllowHost); err != nil {
		return eg, err
	}
	for _, s := range st.Credentials {
		c, err := egress.ParseCredential(s)
		if err != nil {
			return eg, err
		}
		eg.Credentials = append(eg.Credentials, c)
	}
	return eg, nil
}

// Serve implements engine.Server: the sandbox's exec agent and, for a
// sandbox with egress, its proxy, until ctx is done. The supervisor runs
// it for the sandbox's life.
func (s *sandbox) Serve(ctx context.Context) error {
	if s.st.Egress == nil {
		return s.serveAgent(ctx)
	}
	agent := make(chan error, 1)
	go func() { agent <- s.serveAgent(ctx) }()
	err := s.serveProxy(ctx)
	return errors.Join(err, <-agent)
}

// serveProxy serves the sandbox's proxy in its namespace until ctx is
// done, or its audit log fails.
func (s *sandbox) serveProxy(ctx context.Context) error {
	eg, err := s.st.Egress.policy()
	if err != nil {
		return fmt.Errorf("%w: sandbox %q's egress: %v", errdefs.ErrDataLoss, s.st.ID, err)
	}
	p, err := s.e.newProxy(s.st.ID, eg)
	if err != nil {
		return err
	}
	ln, pc, err := listen(ctx, netns.At(s.e.netnsDir(), s.st.ID))
	if err != nil {
		return fmt.Errorf("serving the egress proxy of %q: %w", s.st.ID, err)
	}
	return serve(ctx, p, ln, pc)
}

// awaitProxy waits for sandbox id's supervisor to serve its proxy.
func (e *Engine) awaitProxy(ctx context.Context, id string) error {
	n := netns.At(e.netnsDir(), id)
	deadline := time.Now().Add(proxyWait)
	for {
		ok, err := n.Listening(egressPort)
		if err != nil {
			return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the egress proxy of sandbox %q did not listen within %v: its supervisor serves it (runner.WithSupervisor), and none did", errdefs.ErrUnavailable, id, proxyWait)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: creating sandbox %q: %v", errdefs.ErrAborted, id, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}
