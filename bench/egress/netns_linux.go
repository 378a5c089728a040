package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/netns"
)

// The direct servers' ports, in a proxy's namespace.
const directPort, directTLSPort = 8080, 8443

// serveDirect serves h in n's proxy namespace over plain HTTP and over
// TLS (httptest's certificate, for example.com): the one hop a sandbox
// can make without its proxy. stop closes both; a listener keeps its
// namespace alive.
func serveDirect(ctx context.Context, n *netns.Net, h http.Handler) (secure *httptest.Server, stop func(), err error) {
	ln, err := n.Listen(ctx, directPort)
	if err != nil {
		return nil, nil, err
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	tln, err := n.Listen(ctx, directTLSPort)
	if err != nil {
		srv.Close()
		return nil, nil, err
	}
	secure = httptest.NewUnstartedServer(h)
	secure.Listener.Close()
	secure.Listener = tln
	secure.StartTLS()
	return secure, func() { srv.Close(); secure.Close() }, nil
}

// inNamespaces are the large GETs a sandbox makes, from inside a pair of
// namespaces made as the oci engine makes them: the client in the
// sandbox's, a server in the proxy's (direct: the one hop a sandbox
// could make, over the veth pair), and the proxy at 169.254.0.1 in the
// proxy's, forwarding to the same server's twin on the host's loopback;
// over plain HTTP and over HTTPS (through CONNECT).
// stop removes the namespaces. Root only.
func inNamespaces(h http.Handler, size int) (_ []*scenario, stop func(), err error) {
	if os.Geteuid() != 0 {
		return nil, func() {}, fmt.Errorf("the namespaces' scenarios need root")
	}
	ctx, cancel := context.WithCancel(context.Background())
	dir, err := os.MkdirTemp("", "airlock-bench-egress-")
	if err != nil {
		cancel()
		return nil, nil, err
	}
	const id = "bench-egress"
	n, err := netns.Create(ctx, dir, id)
	if err != nil {
		cancel()
		os.RemoveAll(dir)
		return nil, nil, err
	}
	var closers []func()
	stop = func() {
		cancel()
		for _, c := range closers {
			c()
		}
		netns.Remove(dir, id)
		os.RemoveAll(dir)
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	secure, closeDirect, err := serveDirect(ctx, n, h)
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, closeDirect)
	// The host's twins, for the proxy.
	twin, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	tsrv := &http.Server{Handler: h}
	go tsrv.Serve(twin)
	closers = append(closers, func() { tsrv.Close() })
	stwin := httptest.NewTLSServer(h)
	closers = append(closers, stwin.Close)
	stwinAddr := strings.TrimPrefix(stwin.URL, "https://")

	list, err := egress.ParseAllowlist([]string{twin.Addr().String(), stwinAddr})
	if err != nil {
		return nil, nil, err
	}
	p, err := egress.New(id, list, func(egress.Record) error { return nil }, egress.WithLimits(egress.Limits{Bytes: 1 << 62}))
	if err != nil {
		return nil, nil, err
	}
	pln, err := n.Listen(ctx, 3128)
	if err != nil {
		return nil, nil, err
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx, pln) }()
	closers = append(closers, func() { cancel(); <-served })

	// A dialer whose sockets are made in the sandbox's namespace.
	f, err := os.Open(n.SandboxPath())
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, func() { f.Close() })
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		type res struct {
			c   net.Conn
			err error
		}
		ch := make(chan res, 1)
		go func() {
			// This thread ends in the sandbox's namespace: it is never
			// given back (returning locked ends it).
			runtime.LockOSThread()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				ch <- res{nil, err}
				return
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			ch <- res{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
	tlsConf := secure.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	tlsConf.ServerName = "example.com"
	client := func(proxied bool) *http.Client {
		tr := &http.Transport{DialContext: dial, DisableCompression: true, TLSClientConfig: tlsConf}
		if proxied {
			tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: net.JoinHostPort(netns.ProxyAddr, "3128")})
		}
		return &http.Client{Transport: tr}
	}
	direct := "http://" + net.JoinHostPort(netns.ProxyAddr, strconv.Itoa(directPort))
	return []*scenario{
		{name: fmt.Sprintf("%d MiB http GET, in the namespaces, direct", size>>20), bytes: size, fn: get(client(false), direct+"/blob", 1)},
		{name: fmt.Sprintf("%d MiB http GET, in the namespaces, proxy", size>>20), bytes: size, fn: get(client(true), "http://"+twin.Addr().String()+"/blob", 1)},
		{name: fmt.Sprintf("%d MiB https GET, in the namespaces, direct", size>>20), bytes: size, fn: get(client(false), "https://"+net.JoinHostPort(netns.ProxyAddr, strconv.Itoa(directTLSPort))+"/blob", 1)},
		{name: fmt.Sprintf("%d MiB https GET, in the namespaces, CONNECT", size>>20), bytes: size, fn: get(client(true), stwin.URL+"/blob", 1)},
	}, stop, nil
}
