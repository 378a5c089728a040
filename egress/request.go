package egress

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// target is what one request asks the proxy for.
type target struct {
	kind string
	// host is a normalized name, or addr's text when the sandbox gave an
	// IP literal.
	host string
	addr netip.Addr
	port uint16
	// portGiven says the request named a port.
	portGiven bool
}

// hostHeader is the Host header for t: its host, with its port when the
// request named one.
func (t target) hostHeader() string {
	switch {
	case t.portGiven:
		return net.JoinHostPort(t.host, strconv.Itoa(int(t.port)))
	case t.addr.Is6():
		return "[" + t.host + "]"
	}
	return t.host
}

// refusal is a request the proxy will not serve: its reason, and a
// sentence for the sandbox.
type refusal struct {
	reason, why string
}

func (r *refusal) Error() string { return r.reason + ": " + r.why }

func badRequest(format string, args ...any) *refusal {
	return &refusal{ReasonBadRequest, fmt.Sprintf(format, args...)}
}

// readRequest reads one request's header from br. Its body, when it has
// one, is left to be read from req.Body.
func readRequest(br *bufio.Reader) (*http.Request, target, error) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, target{}, err
	}
	t, err := parseTarget(req)
	return req, t, err
}

// parseTarget reads where req goes: CONNECT HOST:PORT, GET http://HOST[:PORT]/…
// (or an origin-form target with a Host header). It refuses anything else.
func parseTarget(req *http.Request) (target, error) {
	if req.ProtoMajor != 1 {
		return target{}, badRequest("only HTTP/1 requests are proxied")
	}
	var t target
	var authority string
	switch {
	case req.Method == http.MethodConnect:
		t.kind = KindConnect
		authority = req.RequestURI
	case strings.EqualFold(req.Method, http.MethodTrace) || strings.EqualFold(req.Method, "TRACK"):
		// Method names are case-sensitive, but a server may take "trace".
		return target{}, &refusal{ReasonMethod, "TRACE echoes a request's headers back and is not proxied"}
	case req.URL.IsAbs():
		t.kind = KindHTTP
		switch {
		case req.URL.Scheme != "http":
			return target{}, badRequest("only http:// URLs are forwarded; for https://, the client must use CONNECT")
		case req.URL.User != nil:
			return target{}, badRequest("a URL with a user name or password is not forwarded")
		case req.URL.Opaque != "":
			return target{}, badRequest("the URL has no host")
		}
		authority = req.URL.Host
	default:
		t.kind = KindHTTP
		if !strings.HasPrefix(req.RequestURI, "/") {
			return target{}, badRequest("the request target is neither a URL nor a path")
		}
		authority = req.Host
	}
	host, port, err := splitHostPort(authority)
	if err != nil || host == "" {
		return target{}, badRequest("the request names no host the proxy can read")
	}
	if port != "" {
		p, err := parsePort(port)
		if err != nil {
			return target{}, badRequest("%v", err)
		}
		t.port, t.portGiven = p, true
	} else if t.kind == KindConnect {
		return target{}, badRequest("CONNECT needs HOST:PORT")
	} else {
		t.port = 80
	}
	if addr, ok, err := parseAddr(host); err != nil {
		return target{}, badRequest("%v", err)
	} else if ok {
		t.addr, t.host = addr, addr.String()
		return t, nil
	}
	if t.host, err = normalizeName(host); err != nil {
		return target{}, badRequest("%v", err)
	}
	return t, nil
}

// hopByHop are the headers of one hop, never forwarded.
var hopByHop = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// dropHopByHop removes h's hop-by-hop headers, those its Connection
// header names included.
func dropHopByHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopByHop {
		h.Del(name)
	}
}
