package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"example.org", "*.example.org:8443", "127.0.0.1:80", "[::1]:443", "::1", "*", "127.1", "a..b", "[fe80::1%eth0]:1", "xn--bcher-kva.example"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Want == "" {
				t.Fatalf("ParseRule(%q): %v is not an *Error saying what to give", s, err)
			}
			return
		}
		if r.Addr.IsValid() == (r.Host != "") {
			t.Fatalf("ParseRule(%q) = %#v: one of Host and Addr", s, r)
		}
		back, err := ParseRule(r.String())
		if err != nil || back != r {
			t.Fatalf("ParseRule(%q) = %v, which reads back as %v, %v", s, r, back, err)
		}
		a := mustAllow(t, r.String())
		if _, err := a.Narrow(a); err != nil {
			t.Fatalf("%v does not narrow to itself: %v", r, err)
		}
		if r.Host != "" && !strings.HasPrefix(r.Host, "*") && !a.AllowsName(r.Host, r.Ports()[0]) {
			t.Fatalf("%v does not allow its own host", r)
		}
		if r.Addr.IsValid() && !a.Dialable(r.Addr, r.Ports()[0]) {
			t.Fatalf("%v does not allow dialling its own address", r)
		}
	})
}

func FuzzParseCredential(f *testing.F) {
	for _, s := range []string{"api.example.com=Authorization:KEY", "h.example:8443=X-Key:@/f", "=:", "a=b:c", "*.x.org=A:B", "h.example=Host:K"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCredential(s)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("ParseCredential(%q): %v is not an *Error", s, err)
			}
			return
		}
		if back, err := ParseCredential(c.String()); err != nil || back != c {
			t.Fatalf("ParseCredential(%q) = %v, which reads back as %v, %v", s, c, back, err)
		}
		if c.File == "" {
			r, err := c.Load(func(string) (string, bool) { return "v", true })
			if err != nil || r.Header != c.Header || reserved[r.Header] {
				t.Fatalf("Load(%v) = %v, %v", c, r, err)
			}
		}
	})
}

// FuzzHandle feeds raw bytes to a proxy that allows nothing, as a
// sandbox's connection: whatever they are, the proxy answers with a
// refusal it can read or closes, writes exactly one record, and never
// panics.
func FuzzHandle(f *testing.F) {
	for _, s := range []string{
		"GET http://example.org/ HTTP/1.1\r\nHost: example.org\r\n\r\n",
		"CONNECT example.org:443 HTTP/1.1\r\n\r\n",
		"CONNECT [::1]:22 HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n",
		"POST http://a.example/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"TRACE http://example.org/ HTTP/1.1\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"GET http://u:p@example.org/ HTTP/1.0\r\n\r\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var logged bytes.Buffer
		var recs []Record
		p, err := New("sb-fuzz", Allowlist{}, func(r Record) error { recs = append(recs, r); return nil },
			WithLogger(slog.New(slog.NewTextHandler(&logged, nil))),
			WithLimits(Limits{HeaderBytes: 4096}),
			WithResolver(func(context.Context, string) ([]netip.Addr, error) { return nil, errors.New("no resolver") }))
		if err != nil {
			t.Fatal(err)
		}
		c := &bufConn{r: bytes.NewReader(in)}
		p.handle(context.Background(), c)
		if logged.Len() != 0 {
			t.Fatalf("the proxy logged: %s", logged.String())
		}
		if len(recs) != 1 || recs[0].Allowed {
			t.Fatalf("records %+v, want one refusal", recs)
		}
		resp, err := http.ReadResponse(bufio.NewReader(&c.w), nil)
		if err != nil {
			t.Fatalf("the proxy's answer %q: %v", c.w.String(), err)
		}
		if s := resp.StatusCode; s != 400 && s != 403 && s != 405 {
			t.Fatalf("status %d", s)
		}
	})
}

// bufConn is a connection whose peer sent in and then closed its side.
type bufConn struct {
	r *bytes.Reader
	w bytes.Buffer
}

func (c *bufConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *bufConn) Write(b []byte) (int, error)      { return c.w.Write(b) }
func (c *bufConn) Close() error                     { return nil }
func (c *bufConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *bufConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *bufConn) SetDeadline(time.Time) error      { return nil }
func (c *bufConn) SetReadDeadline(time.Time) error  { return nil }
func (c *bufConn) SetWriteDeadline(time.Time) error { return nil }
