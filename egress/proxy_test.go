package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// harness is a proxy on loopback with a fake resolver and the records it
// wrote.
type harness struct {
	t     testing.TB
	p     *Proxy
	addr  string
	mu    sync.Mutex
	recs  []Record
	names map[string][]netip.Addr
	seen  int
	// lookups are the names resolved.
	lookups []string
	done    chan error
	stop    context.CancelFunc
}

func newHarness(t testing.TB, allow []string, opts ...Option) *harness {
	t.Helper()
	h := &harness{t: t, names: map[string][]netip.Addr{}, done: make(chan error, 1)}
	resolve := func(ctx context.Context, host string) ([]netip.Addr, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.lookups = append(h.lookups, host)
		if a, ok := h.names[host]; ok {
			return a, nil
		}
		return nil, fmt.Errorf("no such host %q", host)
	}
	audit := func(r Record) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.recs = append(h.recs, r)
		return nil
	}
	p, err := New("sb-test", mustAllow(t, allow...), audit, append([]Option{WithResolver(resolve)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	h.p = p
	h.serve(p)
	return h
}

func (h *harness) serve(p *Proxy) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	go func() { h.done <- p.Serve(ctx, ln) }()
	h.t.Cleanup(func() {
		cancel()
		select {
		case <-h.done:
		case <-time.After(10 * time.Second):
			h.t.Error("Serve did not return after its context ended")
		}
	})
}

func (h *harness) resolveTo(name string, addrs ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, a := range addrs {
		h.names[name] = append(h.names[name], netip.MustParseAddr(a))
	}
}

// client is an HTTP client whose proxy is h, trusting roots for https and
// following no redirect.
func (h *harness) client(roots *x509.CertPool) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: h.addr}),
			TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "example.com"},
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       10 * time.Second,
	}
}

// records waits until n records are in, and returns them.
func (h *harness) records(n int) []Record {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h.mu.Lock()
		got := append([]Record(nil), h.recs...)
		h.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%d records, want %d: %+v", len(got), n, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// last waits for the record after those last has returned, and returns
// it.
func (h *harness) last() Record {
	h.t.Helper()
	h.seen++
	return h.records(h.seen)[h.seen-1]
}

func portOf(t *testing.T, rawURL string) uint16 {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return uint16(p)
}

// counting is an upstream that counts its requests and answers with
// what it was asked.
type counting struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.reqs = append(c.reqs, r.Clone(context.Background()))
	c.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	fmt.Fprintf(w, "%s %s %s body=%d", r.Method, r.Host, r.URL.RequestURI(), len(body))
}

func (c *counting) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.reqs)
}

func upstream(t *testing.T) (*httptest.Server, *counting) {
	c := &counting{}
	s := httptest.NewServer(c)
	t.Cleanup(s.Close)
	return s, c
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func checkRecord(t *testing.T, r Record, kind, host string, allowed bool, reason string) {
	t.Helper()
	if r.Kind != kind || r.Host != host || r.Allowed != allowed || r.Reason != reason || r.SandboxID != "sb-test" {
		t.Errorf("record %+v, want kind %s host %s allowed %v reason %s", r, kind, host, allowed, reason)
	}
}

func TestForwardAllowed(t *testing.T) {
	s, c := upstream(t)
	port := portOf(t, s.URL)
	h := newHarness(t, []string{fmt.Sprintf("app.test:%d", port), fmt.Sprintf("127.0.0.1:%d", port)})
	h.resolveTo("app.test", "127.0.0.1")
	code, body := get(t, h.client(nil), fmt.Sprintf("http://app.test:%d/p?secret-query=1", port))
	if code != 200 || !strings.Contains(body, "GET app.test:") || !strings.Contains(body, "/p?secret-query=1") {
		t.Fatalf("got %d %q", code, body)
	}
	r := h.last()
	checkRecord(t, r, KindHTTP, "app.test", true, ReasonClosed)
	if r.Port != port || r.Addr != netip.MustParseAddr("127.0.0.1") || r.Status != 200 || r.BytesUp == 0 || r.BytesDown == 0 {
		t.Errorf("record %+v", r)
	}
	b, _ := json.Marshal(r)
	if strings.Contains(string(b), "secret-query") || strings.Contains(string(b), "/p") {
		t.Errorf("the record holds the path: %s", b)
	}
	if c.count() != 1 || c.reqs[0].Header.Get("Proxy-Connection") != "" {
		t.Errorf("upstream saw %d requests", c.count())
	}
}

func TestKeepAliveAndBodies(t *testing.T) {
	s, c := upstream(t)
	port := portOf(t, s.URL)
	h := newHarness(t, []string{fmt.Sprintf("127.0.0.1:%d", port)})
	cl := h.client(nil)
	for i := range 3 {
		resp, err := cl.Post(s.URL+"/up", "text/plain", strings.NewReader(strings.Repeat("x", 1000*i)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("body=%d", 1000*i); !strings.HasSuffix(string(b), want) {
			t.Fatalf("got %q, want %s", b, want)
		}
	}
	// A chunked body, and Expect: 100-continue.
	req, _ := http.NewRequest("PUT", s.URL+"/chunked", io.MultiReader(strings.NewReader("abc"), strings.NewReader("def")))
	req.Header.Set("Expect", "100-continue")
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasSuffix(string(b), "body=6") {
		t.Fatalf("got %q", b)
	}
	if recs := h.records(4); len(recs) != 4 || c.count() != 4 {
		t.Fatalf("%d records, %d requests", len(recs), c.count())
	}
	if h.p.Stats().Open > 1 {
		t.Errorf("the client's requests took %d connections", h.p.Stats().Open)
	}
}

func TestHostNotAllowed(t *testing.T) {
	s, c := upstream(t)
	port := portOf(t, s.URL)
	h := newHarness(t, []string{"allowed.test", fmt.Sprintf("127.0.0.1:%d", port)})
	h.resolveTo("other.test", "127.0.0.1")
	h.resolveTo("allowed.test.other.test", "127.0.0.1")
	cl := h.client(nil)
	for _, host := range []string{"other.test", "allowed.test.other.test", "sub.allowed.test"} {
		code, body := get(t, cl, fmt.Sprintf("http://%s:%d/", host, port))
		if code != 403 || !strings.Contains(body, "not on the allowlist") {
			t.Errorf("%s: %d %q", host, code, body)
		}
		checkRecord(t, h.last(), KindHTTP, host, false, ReasonHost)
	}
	if c.count() != 0 {
		t.Errorf("the upstream saw %d requests", c.count())
	}
	// A name not on the list is never resolved: no DNS query carries what
	// the sandbox put in it.
	if len(h.lookups) != 0 {
		t.Errorf("resolved %q", h.lookups)
	}
}

func TestIPLiteralNotListed(t *testing.T) {
	s, c := upstream(t)
	port := portOf(t, s.URL)
	h := newHarness(t, []string{"app.test", "127.0.0.1:1"})
	code, _ := get(t, h.client(nil), s.URL)
	if code != 403 {
		t.Errorf("got %d", code)
	}
	r := h.last()
	checkRecord(t, r, KindHTTP, "127.0.0.1", false, ReasonPort)
	if r.Port != port {
		t.Errorf("record %+v", r)
	}
	// 127.0.0.2 is loopback too, and not listed.
	if st := h.connect(fmt.Sprintf("127.0.0.2:%d", port)); st != 403 {
		t.Errorf("CONNECT 127.0.0.2: %d", st)
	}
	checkRecord(t, h.last(), KindConnect, "127.0.0.2", false, ReasonHost)
	if c.count() != 0 {
		t.Errorf("the upstream saw %d requests", c.count())
	}
}

// TestRebinding: an allowed name that resolves to loopback, private,
// link-local or metadata addresses is refused; the address dialled is
// what counts, and only an exactly listed one passes.
func TestRebinding(t *testing.T) {
	s, c := upstream(t)
	port := portOf(t, s.URL)
	h := newHarness(t, []string{fmt.Sprintf("*.app.test:%d", port), fmt.Sprintf("127.0.0.1:%d", port)})
	for name, addrs := range map[string][]string{
		"loop.app.test":    {"127.0.0.2"},
		"mapped.app.test":  {"::ffff:127.0.0.2"},
		"meta.app.test":    {"169.254.169.254"},
		"private.app.test": {"10.0.0.1", "192.168.0.1", "172.16.0.1"},
		"v6.app.test":      {"::1", "fe80::1", "fd00:ec2::254"},
		"cgnat.app.test":   {"100.100.100.200"},
		"nat64.app.test":   {"64:ff9b::7f00:1"},
		"unspec.app.test":  {"0.0.0.0"},
	} {
		h.resolveTo(name, addrs...)
		code, body := get(t, h.client(nil), fmt.Sprintf("http://%s:%d/", name, port))
		if code != 403 || !strings.Contains(body, ReasonAddress) {
			t.Errorf("%s → %v: %d %q", name, addrs, code, body)
		}
		r := h.last()
		checkRecord(t, r, KindHTTP, name, false, ReasonAddress)
		if want := netip.MustParseAddr(addrs[0]).Unmap(); r.Addr != want {
			t.Errorf("%s: record's address %s, want %s", name, r.Addr, want)
		}
	}
	// The same through CONNECT.
	if st := h.connect(fmt.Sprintf("meta.app.test:%d", port)); st != 403 {
		t.Errorf("CONNECT meta.app.test: %d", st)
	}
	checkRecord(t, h.last(), KindConnect, "meta.app.test", false, ReasonAddress)
	if c.count() != 0 {
		t.Fatalf("the upstream saw %d requests", c.count())
	}
	// A name resolving to a refused address and a listed one dials the
	// listed one only.
	h.resolveTo("mixed.app.test", "10.0.0.1", "127.0.0.1")
	if code, _ := get(t, h.client(nil), fmt.Sprintf("http://mixed.app.test:%d/", port)); code != 200 {
		t.Errorf("mixed: %d", code)
	}
	if r := h.last(); r.Addr != netip.MustParseAddr("127.0.0.1") || !r.Allowed {
		t.Errorf("mixed: %+v", r)
	}
}

func dialRaw(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

// connect sends CONNECT target on a connection of its own and returns
// the proxy's status.
func (h *harness) connect(target string) int {
	h.t.Helper()
	conn := dialRaw(h.t, h.addr)
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\n\r\n", target)
	return status(h.t, conn)
}

func status(t testing.TB, c net.Conn) int {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the proxy's answer: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestConnectTunnel(t *testing.T) {
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "tls ok") }))
	defer s.Close()
	port := portOf(t, s.URL)
	roots := x509.NewCertPool()
	roots.AddCert(s.Certificate())
	h := newHarness(t, []string{fmt.Sprintf("127.0.0.1:%d", port), "example.com:" + strconv.Itoa(int(port))})
	h.resolveTo("example.com", "127.0.0.1")
	cl := h.client(roots)
	for _, u := range []string{s.URL, fmt.Sprintf("https://example.com:%d/", port)} {
		if code, body := get(t, cl, u); code != 200 || body != "tls ok" {
			t.Errorf("%s: %d %q", u, code, body)
		}
	}
	cl.CloseIdleConnections()
	recs := h.records(2)
	for _, r := range recs {
		if r.Kind != KindConnect || !r.Allowed || r.Reason != ReasonClosed || r.BytesUp < 100 || r.BytesDown < 100 || r.Addr != netip.MustParseAddr("127.0.0.1") {
			t.Errorf("record %+v", r)
		}
	}
}

func TestPortsNotAllowed(t *testing.T) {
	h := newHarness(t, []string{"example.org", "*.example.net"})
	h.resolveTo("example.org", "93.184.216.34")
	h.resolveTo("a.example.net", "93.184.216.34")
	for _, target := range []string{"example.org:22", "example.org:8443", "a.example.net:25", "example.org:1"} {
		if st := h.connect(target); st != 403 {
			t.Errorf("CONNECT %s: %d", target, st)
		}
		host, _, _ := strings.Cut(target, ":")
		checkRecord(t, h.last(), KindConnect, host, false, ReasonPort)
	}
}

// TestTraceRefused: TRACE and TRACK are refused in any case, since a
// server may take "trace" as TRACE and echo a route's header.
func TestTraceRefused(t *testing.T) {
	s, c := upstream(t)
	h := newHarness(t, []string{fmt.Sprintf("127.0.0.1:%d", portOf(t, s.URL))})
	for _, method := range []string{"TRACE", "trace", "Trace", "TRACK", "track"} {
		req, _ := http.NewRequest(method, s.URL, nil)
		resp, err := h.client(nil).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 || c.count() != 0 {
			t.Errorf("%s: %d, upstream saw %d", method, resp.StatusCode, c.count())
		}
		if r := h.last(); r.Reason != ReasonMethod || r.Allowed {
			t.Errorf("%s: record %+v", method, r)
		}
	}
}

// TestHostileRequests: what the proxy cannot read is answered 400 (or
// closed) and recorded, and the proxy goes on serving.
func TestHostileRequests(t *testing.T) {
	h := newHarness(t, []string{"example.org"}, WithLimits(Limits{HeaderBytes: 4096, HeaderTimeout: 300 * time.Millisecond}))
	for name, in := range map[string]string{
		"long header":     "GET http://example.org/ HTTP/1.1\r\nX: " + strings.Repeat("a", 8192) + "\r\n\r\n",
		"many headers":    "GET http://example.org/ HTTP/1.1\r\n" + strings.Repeat("X: a\r\n", 2000) + "\r\n",
		"long line":       "GET http://example.org/" + strings.Repeat("a", 8192) + " HTTP/1.1\r\n\r\n",
		"http2":           "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"garbage":         "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
		"https url":       "GET https://example.org/ HTTP/1.1\r\nHost: example.org\r\n\r\n",
		"userinfo":        "GET http://u:p@example.org/ HTTP/1.1\r\nHost: example.org\r\n\r\n",
		"connect no port": "CONNECT example.org HTTP/1.1\r\n\r\n",
		"connect path":    "CONNECT /example.org:443 HTTP/1.1\r\n\r\n",
		"no host":         "GET / HTTP/1.1\r\n\r\n",
		"bad host":        "GET / HTTP/1.1\r\nHost: exa mple.org\r\n\r\n",
		"numeric host":    "GET http://2130706433/ HTTP/1.1\r\n\r\n",
		"zone":            "CONNECT [fe80::1%25lo]:443 HTTP/1.1\r\n\r\n",
		"port zero":       "CONNECT example.org:0 HTTP/1.1\r\n\r\n",
		"both lengths":    "POST http://example.org/ HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
		"unfinished":      "GET http://example.org/ HTTP/1.1\r\nX: a",
		"nothing":         "",
	} {
		conn := dialRaw(t, h.addr)
		io.WriteString(conn, in)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != 400 {
				t.Errorf("%s: %d", name, resp.StatusCode)
			}
		}
		if _, err := conn.Read(make([]byte, 1)); err == nil {
			t.Errorf("%s: the connection stays open", name)
		}
	}
	recs := h.records(17)
	for _, r := range recs {
		if r.Allowed || r.Reason != ReasonBadRequest {
			t.Errorf("record %+v", r)
		}
	}
	waitOpen(t, h.p, 0)
}

func TestConnLimit(t *testing.T) {
	h := newHarness(t, []string{"example.org"}, WithLimits(Limits{Conns: 2}))
	for range 2 {
		dialRaw(t, h.addr) // open, silent
	}
	waitOpen(t, h.p, 2)
	conn := dialRaw(t, h.addr)
	if st := status(t, conn); st != 503 {
		t.Errorf("the third connection: %d", st)
	}
	if r := h.last(); r.Reason != ReasonConnLimit || r.Allowed {
		t.Errorf("record %+v", r)
	}
}

func TestByteLimit(t *testing.T) {
	big := strings.Repeat("z", 1<<20)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big) }))
	defer s.Close()
	h := newHarness(t, []string{fmt.Sprintf("127.0.0.1:%d", portOf(t, s.URL))}, WithLimits(Limits{Bytes: 64 << 10}))
	resp, err := h.client(nil).Get(s.URL)
	if err == nil {
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n >= int64(len(big)) {
			t.Fatalf("read %d bytes past a 64 KiB cap", n)
		}
	}
	r := h.last()
	if r.Reason != ReasonByteLimit || r.BytesUp+r.BytesDown > 64<<10 {
		t.Errorf("record %+v", r)
	}
	if got := h.p.Stats().Bytes; got != 64<<10 {
		t.Errorf("bytes taken %d, want %d", got, 64<<10)
	}
	code, _ := get(t, h.client(nil), s.URL)
	if r := h.last(); code != 403 || r.Reason != ReasonByteLimit {
		t.Errorf("after the cap: %d, %+v", code, r)
	}
}

func TestIdleTimeout(t *testing.T) {
	ln := tcpServer(t, func(net.Conn) {}) // accepts, says nothing
	h := newHarness(t, []string{ln.Addr().String()}, WithLimits(Limits{Idle: 200 * time.Millisecond}))
	conn := dialRaw(t, h.addr)
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\n\r\n", ln.Addr())
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	start := time.Now()
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("read %v, want the proxy's close", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("closed after %s", d)
	}
	if r := h.last(); r.Reason != ReasonIdle || !r.Allowed {
		t.Errorf("record %+v", r)
	}
}

func TestAuditFailureStopsProxy(t *testing.T) {
	boom := errors.New("disk full")
	p, err := New("sb-test", mustAllow(t, "example.org"), func(Record) error { return boom })
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, done: make(chan error, 1)}
	h.serve(p)
	conn := dialRaw(t, h.addr)
	io.WriteString(conn, "CONNECT nowhere.test:443 HTTP/1.1\r\n\r\n")
	select {
	case err := <-h.done:
		h.done <- err
		if !errors.Is(err, boom) {
			t.Fatalf("Serve = %v, want the audit's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy goes on after its audit failed")
	}
	if _, err := New("x", Allowlist{}, nil); err == nil {
		t.Error("New takes no audit sink")
	}
	if _, err := New("x", Allowlist{}, func(Record) error { return nil }, WithLimits(Limits{Conns: -1})); err == nil {
		t.Error("New takes a negative limit")
	}
}

func TestServeStopsOnCancel(t *testing.T) {
	ln := tcpServer(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	h := newHarness(t, []string{ln.Addr().String()})
	conn := dialRaw(t, h.addr)
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\n\r\n", ln.Addr())
	br := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v", err)
	}
	h.stop()
	if err := <-h.done; err != nil {
		t.Errorf("Serve = %v", err)
	}
	h.done <- nil
	if _, err := br.ReadByte(); err == nil {
		t.Error("a tunnel outlives the proxy")
	}
	if r := h.last(); r.Reason != ReasonStopped {
		t.Errorf("record %+v", r)
	}
	if err := h.p.Serve(context.Background(), ln); err == nil {
		t.Error("a proxy serves twice")
	}
}

func waitOpen(t *testing.T, p *Proxy, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); p.Stats().Open != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open, want %d", p.Stats().Open, n)
		}
	}
}

// TestHostsOwnAddresses: a public address of the host itself is not
// dialled unless listed, so an allowed name cannot reach the host's own
// services.
func TestHostsOwnAddresses(t *testing.T) {
	h := newHarness(t, []string{"self.test"})
	h.p.local[netip.MustParseAddr("8.8.8.8")] = true
	h.resolveTo("self.test", "8.8.8.8")
	if st := h.connect("self.test:443"); st != 403 {
		t.Errorf("got %d", st)
	}
	checkRecord(t, h.last(), KindConnect, "self.test", false, ReasonAddress)
	if _, err := localAddrs(); err != nil {
		t.Errorf("reading the host's addresses: %v", err)
	}
}

func TestHostHeader(t *testing.T) {
	for _, tc := range []struct {
		t    target
		want string
	}{
		{target{host: "example.org", port: 80}, "example.org"},
		{target{host: "example.org", port: 8080, portGiven: true}, "example.org:8080"},
		{target{host: "::1", addr: netip.MustParseAddr("::1"), port: 80}, "[::1]"},
		{target{host: "::1", addr: netip.MustParseAddr("::1"), port: 80, portGiven: true}, "[::1]:80"},
		{target{host: "127.0.0.1", addr: netip.MustParseAddr("127.0.0.1"), port: 80}, "127.0.0.1"},
	} {
		if got := tc.t.hostHeader(); got != tc.want {
			t.Errorf("hostHeader(%+v) = %q, want %q", tc.t, got, tc.want)
		}
	}
}

// TestUpstreamSilent: a host that takes a request and never answers is
// cut at the idle timeout, and the sandbox's connection with it.
func TestUpstreamSilent(t *testing.T) {
	ln := tcpServer(t, func(c net.Conn) { io.Copy(io.Discard, c) }) // reads, never answers
	h := newHarness(t, []string{ln.Addr().String()}, WithLimits(Limits{Idle: 200 * time.Millisecond}))
	conn := dialRaw(t, h.addr)
	fmt.Fprintf(conn, "GET http://%s/ HTTP/1.1\r\n\r\n", ln.Addr())
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		t.Fatalf("an answer: %d", resp.StatusCode)
	}
	if r := h.last(); r.Reason != ReasonIdle || !r.Allowed || r.BytesUp == 0 {
		t.Errorf("record %+v", r)
	}
}

func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	h := newHarness(t, []string{closed, "gone.test"})
	if st := h.connect(closed); st != 502 {
		t.Errorf("CONNECT to a closed port: %d", st)
	}
	host, _, _ := net.SplitHostPort(closed)
	checkRecord(t, h.last(), KindConnect, host, true, ReasonDial)
	if st := h.connect("gone.test:443"); st != 502 {
		t.Errorf("CONNECT to a name that does not resolve: %d", st)
	}
	checkRecord(t, h.last(), KindConnect, "gone.test", false, ReasonResolve)
}

func TestByteLimitUpload(t *testing.T) {
	s, _ := upstream(t)
	h := newHarness(t, []string{fmt.Sprintf("127.0.0.1:%d", portOf(t, s.URL))}, WithLimits(Limits{Bytes: 32 << 10}))
	resp, err := h.client(nil).Post(s.URL, "application/octet-stream", strings.NewReader(strings.Repeat("u", 1<<20)))
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("a 1 MiB upload passed a 32 KiB cap")
		}
	}
	if r := h.last(); r.Reason != ReasonByteLimit || r.BytesUp > 32<<10 {
		t.Errorf("record %+v", r)
	}
}

// TestUploadAborted: a body the sandbox stops sending is its side's end
// (closed, or bad_request when it cannot be read), not the host's failure.
// The request was allowed and the host dialled, so its record is allowed
// either way, and counts what reached the host.
func TestUploadAborted(t *testing.T) {
	s, _ := upstream(t)
	h := newHarness(t, []string{fmt.Sprintf("127.0.0.1:%d", portOf(t, s.URL))})
	conn := dialRaw(t, h.addr)
	fmt.Fprintf(conn, "POST %s/ HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc", s.URL)
	conn.Close()
	if r := h.last(); !r.Allowed || r.Reason != ReasonClosed || r.BytesUp == 0 {
		t.Errorf("closed mid-body: record %+v; want allowed, %s", r, ReasonClosed)
	}
	conn = dialRaw(t, h.addr)
	fmt.Fprintf(conn, "POST %s/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", s.URL)
	if st := status(t, conn); st != 400 {
		t.Errorf("a malformed chunk: %d", st)
	}
	if r := h.last(); !r.Allowed || r.Reason != ReasonBadRequest {
		t.Errorf("a malformed chunk: record %+v; want allowed, %s", r, ReasonBadRequest)
	}
	// Past the proxy's write buffer, part of the body reached the host.
	conn = dialRaw(t, h.addr)
	fmt.Fprintf(conn, "POST %s/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4000\r\n%s\r\nzz\r\n", s.URL, strings.Repeat("u", 0x4000))
	if st := status(t, conn); st != 400 {
		t.Errorf("a malformed chunk after 16 KiB: %d", st)
	}
	if r := h.last(); !r.Allowed || r.Reason != ReasonBadRequest || r.BytesUp < 0x4000 {
		t.Errorf("a malformed chunk after 16 KiB: record %+v; want allowed, %s, the bytes sent", r, ReasonBadRequest)
	}
}

// tcpServer serves each connection with serve, on loopback; connections
// stay open after serve returns, until the test ends.
func tcpServer(t *testing.T, serve func(net.Conn)) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go serve(c)
		}
	}()
	return ln
}

// TestByteLimitTunnel: past the cap, a tunnel is cut both ways, even when
// the sandbox keeps its side open.
func TestByteLimitTunnel(t *testing.T) {
	ln := tcpServer(t, func(c net.Conn) { c.Write(bytes.Repeat([]byte("d"), 1<<20)) })
	h := newHarness(t, []string{ln.Addr().String()}, WithLimits(Limits{Bytes: 64 << 10}))
	conn := dialRaw(t, h.addr)
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\n\r\n", ln.Addr())
	br := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v", err)
	}
	n, _ := io.Copy(io.Discard, br)
	if n > 64<<10 {
		t.Errorf("read %d bytes past a 64 KiB cap", n)
	}
	if r := h.last(); r.Reason != ReasonByteLimit || r.BytesDown != n {
		t.Errorf("record %+v, read %d", r, n)
	}
}

// TestIPv6Literal: [::1]:PORT on the list allows exactly that, through
// CONNECT and plain HTTP.
func TestIPv6Literal(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Host) }))
	s.Listener = ln
	s.Start()
	defer s.Close()
	port := portOf(t, s.URL)
	h := newHarness(t, []string{fmt.Sprintf("[::1]:%d", port)})
	if code, body := get(t, h.client(nil), s.URL); code != 200 || body != fmt.Sprintf("[::1]:%d", port) {
		t.Errorf("GET %s: %d %q", s.URL, code, body)
	}
	checkRecord(t, h.last(), KindHTTP, "::1", true, ReasonClosed)
	if st := h.connect(fmt.Sprintf("[::1]:%d", port%65535+1)); st != 403 {
		t.Errorf("another port: %d", st)
	}
	checkRecord(t, h.last(), KindConnect, "::1", false, ReasonPort)
	if st := h.connect(fmt.Sprintf("[::ffff:127.0.0.1]:%d", port)); st != 403 {
		t.Errorf("IPv4 loopback, mapped: %d", st)
	}
	checkRecord(t, h.last(), KindConnect, "127.0.0.1", false, ReasonHost)
}

// TestUpstreamHostile: a host's response is read under the same caps as a
// request: a header past the cap, a protocol switch nobody asked for and
// garbage are each a 502, never passed on.
func TestUpstreamHostile(t *testing.T) {
	for name, answer := range map[string]string{
		"long header": "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", 64<<10) + "\r\n\r\n",
		"switch":      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n",
		"garbage":     "SSH-2.0-OpenSSH_9.6\r\n",
		"interims":    strings.Repeat("HTTP/1.1 103 Early Hints\r\n\r\n", 20),
	} {
		ln := tcpServer(t, func(c net.Conn) {
			http.ReadRequest(bufio.NewReader(c))
			io.WriteString(c, answer)
		})
		h := newHarness(t, []string{ln.Addr().String()})
		code, _ := get(t, h.client(nil), "http://"+ln.Addr().String()+"/")
		if r := h.last(); code != 502 || r.Reason != ReasonUpstreamHeader {
			t.Errorf("%s: %d, record %+v", name, code, r)
		}
	}
}

// TestBodilessChunked: a 204, a 304 or an answer to HEAD has no body
// even when the host says it is chunked, so nothing follows its header
// and the kept connection's next answer is the client's next response.
func TestBodilessChunked(t *testing.T) {
	ln := tcpServer(t, func(c net.Conn) {
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		switch {
		case req.URL.Path == "/ok":
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		case req.Method == http.MethodHead:
			io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
		default:
			fmt.Fprintf(c, "HTTP/1.1 %s\r\nTransfer-Encoding: chunked\r\n\r\n", req.URL.Path[1:])
		}
	})
	h := newHarness(t, []string{ln.Addr().String()})
	next := "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
	for first, want := range map[string]string{
		"GET /204%20No%20Content":   "HTTP/1.1 204 No Content\r\n\r\n",
		"GET /304%20Not%20Modified": "HTTP/1.1 304 Not Modified\r\n\r\n",
		"HEAD /":                    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
	} {
		conn := dialRaw(t, h.addr)
		method, path, _ := strings.Cut(first, " ")
		fmt.Fprintf(conn, "%s http://%s%s HTTP/1.1\r\n\r\nGET http://%s/ok HTTP/1.1\r\nConnection: close\r\n\r\n", method, ln.Addr(), path, ln.Addr())
		got, err := io.ReadAll(conn)
		if err != nil || string(got) != want+next {
			t.Errorf("%s: %q, %v; want %q", first, got, err, want+next)
		}
	}
}

func TestRecordEvent(t *testing.T) {
	r := Record{Time: time.Unix(1, 0), SandboxID: "sb", Kind: KindConnect, Host: "example.org", Port: 443,
		Addr: netip.MustParseAddr("192.0.2.1"), BytesUp: 1, BytesDown: 2, Allowed: true, Reason: ReasonClosed, Duration: time.Second}
	ev := r.Event()
	b, _ := json.Marshal(r)
	var fromJSON map[string]any
	json.Unmarshal(b, &fromJSON)
	delete(fromJSON, "time")
	for k := range fromJSON {
		if _, ok := ev[k]; !ok {
			t.Errorf("the event has no %q", k)
		}
	}
	if ev["event"] != "egress" || ev["addr"] != "192.0.2.1" || ev["started"] != "1970-01-01T00:00:01Z" || len(ev) != len(fromJSON)+2 {
		t.Errorf("event %v", ev)
	}
	if ev := (Record{}).Event(); ev["addr"] != nil || ev["status"] != nil {
		t.Errorf("a zero address or status is written: %v", ev)
	}
}

// failingListener fails every Accept once failing is set.
type failingListener struct {
	net.Listener
	failing atomic.Bool
}

func (l *failingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil && l.failing.Load() {
		c.Close()
		return nil, errors.New("accept failing")
	}
	return c, err
}

// TestServeAcceptFails: an accept error that persists ends Serve with it,
// and the connections open are closed, not waited for.
func TestServeAcceptFails(t *testing.T) {
	up := tcpServer(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	p, err := New("sb-test", mustAllow(t, up.Addr().String()), func(Record) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &failingListener{Listener: inner}
	done := make(chan error, 1)
	go func() { done <- p.Serve(context.Background(), ln) }()

	conn := dialRaw(t, inner.Addr().String())
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\n\r\n", up.Addr())
	br := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v", err)
	}
	ln.failing.Store(true)
	go func() { // keep Accept failing
		for i := 0; i < 200; i++ {
			c, err := net.Dial("tcp", inner.Addr().String())
			if err != nil {
				return
			}
			c.Close()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "accept failing") {
			t.Errorf("Serve = %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Serve goes on through a persistent accept error, or waits for its tunnel")
	}
	if _, err := br.ReadByte(); err == nil {
		t.Error("the tunnel outlives Serve")
	}
}

// TestAuditFailsBeforeServe: the sink failing on a DNS query answered
// before Serve begins (the engine starts both at once) stops Serve as it
// begins, with the sink's error, rather than calling a stop not yet set.
func TestAuditFailsBeforeServe(t *testing.T) {
	boom := errors.New("disk full")
	p, err := New("sb", Allowlist{}, func(Record) error { return boom })
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dns := make(chan error, 1)
	go func() { dns <- p.ServeDNS(ctx, pc) }()
	// A query for "a." (id 1, RD, one question, type A, class IN).
	c.Write([]byte{0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 'a', 0, 0, 1, 0, 1})
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 512)); err != nil {
		t.Fatalf("no answer to the query: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Serve(ctx, ln); !errors.Is(err, boom) {
		t.Errorf("Serve after the sink failed = %v, want its error", err)
	}
	cancel()
	<-dns
}

// TestEmptyConnectionsSampled: an allowed connection that moves no byte
// (a closed port of an allowed host, a tunnel opened and closed empty)
// costs no budget, so a sandbox making them in a loop has them written
// under the refusals' bound, and the records count those left out.
func TestEmptyConnectionsSampled(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	open := tcpServer(t, func(c net.Conn) { io.Copy(io.Discard, c); c.Close() }).Addr().String()
	for name, try := range map[string]func(t *testing.T, h *harness){
		"dial_failed": func(t *testing.T, h *harness) {
			if st := h.connect(closed); st != 502 {
				t.Fatalf("CONNECT to a closed port: %d", st)
			}
		},
		"empty tunnel": func(_ *testing.T, h *harness) {
			conn, _ := h.tunnelTo(open)
			conn.Close()
		},
	} {
		t.Run(name, func(t *testing.T) {
			const n = 3 * refusedBurst
			// Closed tunnels end a moment later: none waits for a slot.
			h := newHarness(t, []string{closed, open}, WithLimits(Limits{Conns: n}))
			for range n {
				try(t, h)
			}
			h.stop()
			err := <-h.done
			h.done <- err // for the cleanup's wait
			h.mu.Lock()
			defer h.mu.Unlock()
			written, left := 0, int64(0)
			for _, r := range h.recs {
				if r.Allowed {
					written++
				}
				left += r.Suppressed
			}
			if written > refusedBurst+10 || int64(written)+left != n {
				t.Errorf("%d allowed records written, %d counted as left out, for %d empty connections", written, left, n)
			}
			if b := h.p.Stats().Bytes; b != 0 {
				t.Errorf("%d bytes of budget used", b)
			}
		})
	}
}

// TestLastAuditFailureReported: when the sink fails on the record that
// counts the refusals left out, written as the proxy ends, Serve says so.
func TestLastAuditFailureReported(t *testing.T) {
	boom := errors.New("disk full")
	p, err := New("sb", mustAllow(t, "example.org"), func(r Record) error {
		if r.Reason == ReasonSuppressed {
			return boom
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, ln) }()
	for range 2 * refusedBurst {
		c := dialRaw(t, ln.Addr().String())
		fmt.Fprintf(c, "CONNECT other.test:443 HTTP/1.1\r\n\r\n")
		http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
	}
	cancel()
	if err := <-done; !errors.Is(err, boom) {
		t.Errorf("Serve = %v, but the last audit record failed", err)
	}
}
