package egress

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// dnsQuery is a query for name (no final dot), type A, with id; a
// response when response is set.
func dnsQuery(id uint16, name string, response bool) []byte {
	flags := uint16(0x0100) // RD
	if response {
		flags |= 0x8000
	}
	q := binary.BigEndian.AppendUint16(nil, id)
	q = binary.BigEndian.AppendUint16(q, flags)
	q = append(q, 0, 1, 0, 0, 0, 0, 0, 0)
	for _, l := range strings.Split(name, ".") {
		q = append(append(q, byte(len(l))), l...)
	}
	return append(q, 0, 0, 1, 0, 1)
}

// Every DNS query is answered REFUSED, with its id and question, and
// recorded with the name it asked; a packet that is not a query gets no
// answer and is recorded as a bad request. Nothing is resolved.
func TestServeDNS(t *testing.T) {
	h := newHarness(t, []string{"pypi.org"})
	c, stop := h.serveDNS()

	for i, name := range []string{"pypi.org", "secret-data.attacker.example"} {
		id := uint16(0x1234 + i)
		q := dnsQuery(id, name, false)
		if _, err := c.Write(q); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("no answer to %s: %v", name, err)
		}
		// The same id and question; QR, RD, REFUSED; one question, no
		// other record.
		want := append([]byte(nil), q...)
		want[2], want[3] = 0x81, 0x05
		if !bytes.Equal(buf[:n], want) {
			t.Errorf("answer to %s: % x; want % x", name, buf[:n], want)
		}
		checkRecord(t, h.last(), KindDNS, name, false, ReasonDNS)
	}

	// A response is not answered (no loop between two such servers).
	if _, err := c.Write(dnsQuery(7, "a.example", true)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	checkRecord(t, h.last(), KindDNS, "", false, ReasonBadRequest)
	checkRecord(t, h.last(), KindDNS, "", false, ReasonBadRequest)
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c.Read(make([]byte, 512)); err == nil {
		t.Errorf("an answer of %d bytes to a response", n)
	}
	if len(h.lookups) != 0 {
		t.Errorf("names resolved: %v", h.lookups)
	}
	if got := h.p.Stats().Totals; got != (Totals{Refused: 4}) {
		t.Errorf("totals %+v; want 4 refused", got)
	}
	if err := stop(); err != nil {
		t.Errorf("ServeDNS: %v", err)
	}
}

// serveDNS serves h's proxy's DNS on loopback; it returns a client
// connected to it, and stop, which ends ServeDNS and returns its error.
func (h *harness) serveDNS() (net.Conn, func() error) {
	h.t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- h.p.ServeDNS(ctx, pc) }()
	c, err := net.Dial("udp4", pc.LocalAddr().String())
	if err != nil {
		cancel()
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c, func() error { cancel(); return <-served }
}

// The totals sum the records: allowed and refused, bytes each way.
func TestStatsTotals(t *testing.T) {
	s, _ := upstream(t)
	port := portOf(t, s.URL)
	h := newHarness(t, []string{fmt.Sprintf("127.0.0.1:%d", port)})
	code, body := get(t, h.client(nil), s.URL+"/a")
	if code != 200 {
		t.Fatalf("GET: %d %s", code, body)
	}
	if code, _ := get(t, h.client(nil), "http://127.0.0.1:1/"); code != 403 {
		t.Fatalf("GET port 1: %d", code)
	}
	recs := h.records(2)
	var want Totals
	for _, r := range recs {
		if r.Allowed {
			want.Allowed++
		} else {
			want.Refused++
		}
		want.BytesUp += r.BytesUp
		want.BytesDown += r.BytesDown
	}
	if got := h.p.Stats().Totals; got != want || want.Allowed != 1 || want.Refused != 1 || want.BytesDown == 0 || want.BytesUp == 0 {
		t.Errorf("totals %+v; want %+v, one allowed with bytes both ways, one refused", got, want)
	}
}

// What is not a plain query gets no answer: too short, a response, two
// questions, a compressed or truncated name, a label over 63 bytes. A
// query with no question is answered; one whose name is not a host name
// is answered without a name in its record.
func TestRefuseQuery(t *testing.T) {
	q := dnsQuery(1, "a.example", false)
	two := append([]byte(nil), q...)
	two[5] = 2
	none := append([]byte(nil), q[:12]...)
	none[5] = 0
	compressed := append(append([]byte(nil), q[:12]...), 0xc0, 0x0c, 0, 1, 0, 1)
	long := dnsQuery(1, strings.Repeat("a", 64)+".example", false)
	odd := dnsQuery(1, "bad_label!.example", false)
	for _, tc := range []struct {
		name string
		q    []byte
		ok   bool
		host string
	}{
		{"query", q, true, "a.example"},
		{"short", q[:11], false, ""},
		{"response", dnsQuery(1, "a.example", true), false, ""},
		{"two questions", two, false, ""},
		{"no question", none, true, ""},
		{"compressed", compressed, false, ""},
		{"truncated", q[:len(q)-3], false, ""},
		{"long label", long, false, ""},
		{"not a host name", odd, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, host, ok := refuseQuery(tc.q)
			if ok != tc.ok || host != tc.host {
				t.Fatalf("ok %v host %q; want %v %q", ok, host, tc.ok, tc.host)
			}
			if ok && (len(a) < 12 || a[3]&0xf != 5 || a[2]&0x80 == 0) {
				t.Errorf("answer % x is not REFUSED", a)
			}
		})
	}
}
