package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// handle serves one connection of the sandbox: a CONNECT tunnel, or
// plain HTTP requests one after another.
func (p *Proxy) handle(ctx context.Context, raw net.Conn) {
	defer raw.Close()
	id := newIdle(p.limits.Idle, raw)
	defer id.stop()
	defer context.AfterFunc(ctx, func() { raw.Close() })()
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("egress connection failed", "sandbox_id", p.id, "panic", fmt.Sprint(r))
		}
	}()
	client := activeConn{raw, id}
	cr := &capReader{r: client}
	br := bufio.NewReaderSize(cr, 4096)
	for first := true; ; first = false {
		start := time.Now()
		cr.n = int64(p.limits.HeaderBytes)
		raw.SetReadDeadline(start.Add(p.limits.HeaderTimeout))
		req, t, err := readRequest(br)
		if err != nil {
			var ref *refusal
			if !errors.As(err, &ref) {
				if !first && cr.n == int64(p.limits.HeaderBytes) && br.Buffered() == 0 {
					return // closed or silent between requests
				}
				ref = badRequest("the request could not be read")
			}
			rec := Record{Time: start, Kind: t.kind, Host: t.host, Port: t.port, Reason: ref.reason}
			if rec.Kind == "" {
				rec.Kind = KindHTTP
				if req != nil && req.Method == http.MethodConnect {
					rec.Kind = KindConnect
				}
			}
			p.refuse(client, rec, ref)
			return
		}
		cr.n = -1
		raw.SetReadDeadline(time.Time{})
		if t.kind == KindConnect {
			p.tunnel(ctx, client, br, id, t, start)
			return
		}
		if !p.forward(ctx, client, req, id, t, start) {
			return
		}
	}
}

// refuse answers a refused request and records it.
func (p *Proxy) refuse(client net.Conn, rec Record, ref *refusal) {
	status := http.StatusForbidden
	switch ref.reason {
	case ReasonBadRequest:
		status = http.StatusBadRequest
	case ReasonMethod:
		status = http.StatusMethodNotAllowed
	case ReasonResolve, ReasonDial, ReasonTLS, ReasonUpstream, ReasonUpstreamHeader:
		status = http.StatusBadGateway
	}
	client.SetWriteDeadline(time.Now().Add(time.Second))
	writeRefusal(client, status, ref.reason, ref.why)
	p.record(rec)
}

func writeRefusal(w io.Writer, status int, reason, why string) {
	body := "airlock egress: " + reason + ": " + why + "\n"
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}

// dial checks t against the allowlist, resolves it, and connects to the
// first of its addresses that may be dialled; port is where (a route's
// port, for a route). rec gets the address.
func (p *Proxy) dial(ctx context.Context, t target, port uint16, viaRoute bool, id *idle, rec *Record) (*meterConn, *refusal) {
	ctx, cancel := context.WithTimeout(ctx, p.limits.DialTimeout)
	defer cancel()
	if p.budget.spent() {
		return nil, &refusal{ReasonByteLimit, "this sandbox has used its egress byte limit"}
	}
	var addrs []netip.Addr
	if t.addr.IsValid() {
		if !p.allow.AllowsAddr(t.addr, t.port) {
			return nil, p.notAllowed(t)
		}
		addrs = []netip.Addr{t.addr}
	} else {
		if !viaRoute && !p.allow.AllowsName(t.host, t.port) {
			return nil, p.notAllowed(t)
		}
		got, err := p.resolve(ctx, t.host)
		if err != nil || len(got) == 0 {
			return nil, &refusal{ReasonResolve, fmt.Sprintf("%s did not resolve", t.host)}
		}
		rec.Addr = got[0].Unmap()
		for _, a := range got {
			if a = a.Unmap(); p.dialable(a, port) {
				addrs = append(addrs, a)
			}
		}
		if len(addrs) == 0 {
			return nil, &refusal{ReasonAddress, fmt.Sprintf("%s resolves to %s, which is not a public address and not on the allowlist", t.host, rec.Addr)}
		}
	}
	var d net.Dialer
	var err error
	for _, a := range addrs {
		var c net.Conn
		rec.Addr = a
		if c, err = d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, port).String()); err == nil {
			return &meterConn{Conn: c, idle: id, budget: &p.budget}, nil
		}
	}
	return nil, &refusal{ReasonDial, fmt.Sprintf("connecting to %s port %d failed", t.host, port)}
}

// dialable says whether the proxy may connect to addr on port: the
// allowlist names it exactly, or it is public and not one of the host's
// own addresses.
func (p *Proxy) dialable(addr netip.Addr, port uint16) bool {
	return p.allow.AllowsAddr(addr, port) || Public(addr) && !p.local[addr]
}

func (p *Proxy) notAllowed(t target) *refusal {
	for _, r := range p.allow.rules {
		if r.Addr.IsValid() && r.Addr == t.addr || !r.Addr.IsValid() && r.matchesName(t.host) {
			return &refusal{ReasonPort, fmt.Sprintf("port %d of %s is not on the allowlist", t.port, t.host)}
		}
	}
	return &refusal{ReasonHost, fmt.Sprintf("%s is not on the allowlist", t.host)}
}

// tunnel serves a CONNECT: bytes both ways, unseen, until either side
// closes, the idle timeout, the byte cap or the proxy's end.
func (p *Proxy) tunnel(ctx context.Context, client activeConn, br *bufio.Reader, id *idle, t target, start time.Time) {
	rec := Record{Time: start, Kind: KindConnect, Host: t.host, Port: t.port}
	up, ref := p.dial(ctx, t, t.port, false, id, &rec)
	if ref != nil {
		rec.Allowed = ref.reason == ReasonDial
		rec.Reason = ref.reason
		p.refuse(client, rec, ref)
		return
	}
	defer up.Close()
	id.setUp(up.Conn)
	defer context.AfterFunc(ctx, func() { up.Close() })()
	rec.Allowed = true
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		rec.Reason = p.ended(ctx, id, up)
		p.record(rec)
		return
	}
	// Each way ends at its source's end, which is passed on as a
	// half-close; past the byte cap, both ways end at once.
	end := func(dst net.Conn) {
		if up.capped.Load() {
			client.Conn.Close()
			up.Close()
			return
		}
		closeWrite(dst)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// What the client sent after its header is in br.
		var err error
		if b, _ := br.Peek(br.Buffered()); len(b) > 0 {
			_, err = up.Write(b)
		}
		if err == nil {
			up.relay(up, client, false, -1)
		}
		end(up.Conn)
	}()
	up.relay(client, up, true, -1)
	end(client.Conn)
	<-done
	rec.BytesUp, rec.BytesDown = up.up.Load(), up.down.Load()
	rec.Reason = p.ended(ctx, id, up)
	p.record(rec)
}

// ended says how an allowed connection ended.
func (p *Proxy) ended(ctx context.Context, id *idle, up *meterConn) string {
	switch {
	case up.capped.Load():
		return ReasonByteLimit
	case id.fired.Load():
		return ReasonIdle
	case ctx.Err() != nil:
		return ReasonStopped
	}
	return ReasonClosed
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		c.Close()
	}
}

// forward serves one plain HTTP request, through its route when it has
// one. It says whether the client's connection may take another request.
func (p *Proxy) forward(ctx context.Context, client activeConn, req *http.Request, id *idle, t target, start time.Time) bool {
	rec := Record{Time: start, Kind: KindHTTP, Host: t.host, Port: t.port}
	routes := p.routes[t.host]
	if t.addr.IsValid() || (t.portGiven && t.port != 80) {
		routes = nil
	}
	port := t.port
	if len(routes) > 0 {
		rec.Kind, port = KindCredential, routes[0].Port
	}
	up, ref := p.dial(ctx, t, port, len(routes) > 0, id, &rec)
	if ref != nil {
		rec.Allowed = ref.reason == ReasonDial
		rec.Reason = ref.reason
		p.refuse(client, rec, ref)
		return false
	}
	defer up.Close()
	id.setUp(up.Conn)
	defer id.setUp(nil)
	defer context.AfterFunc(ctx, func() { up.Close() })()
	rec.Allowed = true

	var conn net.Conn = up
	host := t.hostHeader()
	if len(routes) > 0 {
		tc := tls.Client(up, &tls.Config{
			ServerName: t.host,
			RootCAs:    p.roots,
			MinVersion: tls.VersionTLS12,
			NextProtos: []string{"http/1.1"},
		})
		hctx, cancel := context.WithTimeout(ctx, p.limits.DialTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			rec.Reason = ReasonTLS
			rec.BytesUp, rec.BytesDown = up.up.Load(), up.down.Load()
			p.refuse(client, rec, &refusal{ReasonTLS, fmt.Sprintf("%s's certificate could not be verified, or TLS failed", t.host)})
			return false
		}
		conn = tc
		host = t.host
		if port != 443 {
			host = net.JoinHostPort(t.host, fmt.Sprint(port))
		}
	}

	var body *eofBody
	if req.Body != nil && req.Body != http.NoBody {
		body = &eofBody{r: req.Body}
	}
	out := &http.Request{
		Method:           req.Method,
		URL:              &url.URL{Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery},
		Proto:            "HTTP/1.1",
		ProtoMajor:       1,
		ProtoMinor:       1,
		Header:           req.Header.Clone(),
		Body:             http.NoBody,
		ContentLength:    req.ContentLength,
		TransferEncoding: req.TransferEncoding,
		Host:             host,
		Close:            true,
	}
	if body != nil {
		out.Body = body
	}
	dropHopByHop(out.Header)
	out.Header.Del("Expect")
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = []string{""} // none, rather than Go's
	}
	for _, r := range routes {
		out.Header.Set(r.Header, r.value)
	}
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		io.WriteString(client, "HTTP/1.1 100 Continue\r\n\r\n")
	}
	status, keep, err := p.exchange(conn, client, out, !req.Close)
	rec.Status = status
	rec.BytesUp, rec.BytesDown = up.up.Load(), up.down.Load()
	rec.Reason = p.ended(ctx, id, up)
	ref = nil
	switch {
	case err == nil:
		p.record(rec)
		return keep && (body == nil || body.eof)
	case status == 0 && errors.As(err, &ref) && ref.reason == ReasonClosed && rec.Reason == ReasonClosed:
		p.record(rec) // the sandbox went away mid-request: no one to answer
	case errors.Is(err, errSandboxGone):
		p.record(rec) // mid-response: its end (closed), not the host's
	case status == 0 && errors.As(err, &ref):
		if rec.Reason == ReasonClosed {
			rec.Reason = ref.reason
		}
		p.refuse(client, rec, &refusal{rec.Reason, ref.why})
	default:
		if rec.Reason == ReasonClosed {
			rec.Reason = ReasonUpstream
		}
		p.record(rec)
	}
	return false
}

// eofBody is a request's body as the upstream request reads it: it says
// whether it was read to its end, or why reading it from the sandbox
// failed, and leaves closing to the server side.
type eofBody struct {
	r   io.Reader
	eof bool
	err error
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.eof = true
	} else if err != nil {
		b.err = err
	}
	return n, err
}

func (*eofBody) Close() error { return nil }

// sendFailed says why writing out to the upstream failed: the sandbox's
// side, when reading its body did (it went away before the body's end,
// or sent one the proxy cannot read), else the upstream's.
func sendFailed(out *http.Request) *refusal {
	b, ok := out.Body.(*eofBody)
	switch {
	case !ok || b.err == nil:
		return &refusal{ReasonUpstream, "sending the request failed"}
	case errors.Is(b.err, io.ErrUnexpectedEOF) || errors.As(b.err, new(net.Error)):
		return &refusal{ReasonClosed, "the sandbox closed its connection before the request's body ended"}
	}
	return badRequest("the request's body could not be read")
}

// errSandboxGone says writing a response to the sandbox failed: it
// closed its connection (or the proxy did, at the idle timeout, the byte
// cap or its end, which Proxy.ended tells apart), and the host is not to
// blame.
var errSandboxGone = errors.New("the sandbox's connection ended before the response did")

// exchange writes out to the upstream and its response back to the
// client; status is the upstream's, 0 before a response was read. The
// client's connection is kept when it asked for that (keep) and the
// response has a known length; keep says whether it was. Once a response
// was read, an error is errSandboxGone when writing to the client failed,
// else the upstream's failure.
func (p *Proxy) exchange(up net.Conn, client net.Conn, out *http.Request, keep bool) (status int, kept bool, err error) {
	bw := bufio.NewWriterSize(up, 4096)
	if err := out.Write(bw); err != nil {
		return 0, false, sendFailed(out)
	}
	if err := bw.Flush(); err != nil {
		return 0, false, &refusal{ReasonUpstream, "sending the request failed"}
	}
	cr := &capReader{r: up}
	ubr := bufio.NewReaderSize(cr, 4096)
	cw := &failWriter{w: client}
	for range 8 {
		cr.n = int64(p.limits.HeaderBytes)
		resp, err := http.ReadResponse(ubr, out)
		if err != nil {
			return 0, false, &refusal{ReasonUpstreamHeader, "the host's response could not be read"}
		}
		cr.n = -1
		dropHopByHop(resp.Header)
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return 0, false, &refusal{ReasonUpstreamHeader, "the host switched protocols, which the proxy does not forward"}
		}
		if resp.StatusCode < 200 {
			// 1xx: passed on, then the real response.
			fmt.Fprintf(cw, "HTTP/1.1 %s\r\n", resp.Status)
			resp.Header.Write(cw)
			io.WriteString(cw, "\r\n")
			continue
		}
		if resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified {
			// No body, whatever the header says: a chunked one would be
			// written a last-chunk the client takes for its next response.
			// (Response.Write writes none after the header for HEAD.)
			resp.TransferEncoding, resp.ContentLength = nil, 0
		}
		kept = keep && (resp.ContentLength >= 0 || len(resp.TransferEncoding) > 0)
		resp.Close = !kept
		w := io.Writer(cw)
		if m, ok := up.(*meterConn); ok && resp.Body != http.NoBody && resp.ContentLength > 0 && len(resp.TransferEncoding) == 0 {
			b := &bodyRelay{client: client, w: cw, m: m, ubr: ubr, body: io.LimitedReader{R: ubr, N: resp.ContentLength}}
			resp.Body, w = b, b
		} else if resp.Body != http.NoBody {
			// Closing the body would read the rest of it, to the byte cap,
			// when the copy to the client fails: the upstream connection
			// ends with this exchange, so what is left is not read.
			resp.Body = io.NopCloser(resp.Body)
		}
		if err := resp.Write(w); err != nil {
			if cw.failed {
				return resp.StatusCode, kept, fmt.Errorf("%w: %w", errSandboxGone, err)
			}
			return resp.StatusCode, kept, err
		}
		return resp.StatusCode, kept, nil
	}
	return 0, false, &refusal{ReasonUpstreamHeader, "the host sent too many interim responses"}
}

// bodyRelay is a response body of known length from the upstream m, and
// the client's connection it is written to (through w, which notes a
// failed write, as ReadFrom does a failed relay). Read reads the body
// through ubr, as http.ReadResponse's would. When Response.Write copies
// the body to it whole (ReadFrom), it writes out what ubr holds and
// relays the rest from m (spliced, on Linux), metered as the tunnel's
// bytes are.
type bodyRelay struct {
	client net.Conn // the client's activeConn
	w      *failWriter
	m      *meterConn
	ubr    *bufio.Reader
	body   io.LimitedReader // over ubr
}

func (b *bodyRelay) Read(p []byte) (int, error) { return b.body.Read(p) }

func (b *bodyRelay) Write(p []byte) (int, error) { return b.w.Write(p) }

func (b *bodyRelay) Close() error { return nil }

// ReadFrom relays the body when r is all of it, as Response.Write hands
// it over (an io.LimitedReader of its length); anything else is copied.
func (b *bodyRelay) ReadFrom(r io.Reader) (int64, error) {
	lr, ok := r.(*io.LimitedReader)
	if !ok || lr.R != io.Reader(b) || lr.N != b.body.N {
		return io.Copy(b.w, r)
	}
	var n int64
	if k := min(int64(b.ubr.Buffered()), b.body.N); k > 0 {
		w, err := io.CopyN(b.w, b.ubr, k)
		n += w
		b.body.N -= w
		if err != nil {
			lr.N -= n
			return n, err
		}
	}
	before := b.m.down.Load()
	err := b.m.relay(b.client, b.m, true, b.body.N)
	if errors.As(err, new(*writeError)) {
		b.w.failed = true
	}
	moved := b.m.down.Load() - before
	n += moved
	b.body.N -= moved
	lr.N -= n
	if err == nil && b.body.N > 0 {
		err = io.ErrUnexpectedEOF // the host ended before its Content-Length
	}
	return n, err
}
