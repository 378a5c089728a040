package egress

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsQuery is a query for name, type A, with id.
func dnsQuery(t *testing.T, id uint16, name string, response bool) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true, Response: response})
	if err := b.StartQuestions(); err != nil {
		t.Fatal(err)
	}
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	q, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// Every DNS query is answered REFUSED, with its id and question, and
// recorded with the name it asked; a packet that is not a query gets no
// answer and is recorded as a bad request. Nothing is resolved.
func TestServeDNS(t *testing.T) {
	h := newHarness(t, []string{"pypi.org"})
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- h.p.ServeDNS(ctx, pc) }()
	c, err := net.Dial("udp4", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	for i, name := range []string{"pypi.org.", "secret-data.attacker.example."} {
		id := uint16(0x1234 + i)
		if _, err := c.Write(dnsQuery(t, id, name, false)); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("no answer to %s: %v", name, err)
		}
		var p dnsmessage.Parser
		hdr, err := p.Start(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		qs, _ := p.AllQuestions()
		if hdr.ID != id || !hdr.Response || hdr.RCode != dnsmessage.RCodeRefused || len(qs) != 1 || qs[0].Name.String() != name {
			t.Errorf("answer to %s: %+v %v; want REFUSED, id %#x, the question", name, hdr, qs, id)
		}
		if ans, _ := p.AllAnswers(); len(ans) != 0 {
			t.Errorf("answer to %s has records: %v", name, ans)
		}
		checkRecord(t, h.last(), KindDNS, name[:len(name)-1], false, ReasonDNS)
	}

	// A response is not answered (no loop between two such servers).
	if _, err := c.Write(dnsQuery(t, 7, "a.example.", true)); err != nil {
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
	cancel()
	if err := <-served; err != nil {
		t.Errorf("ServeDNS: %v", err)
	}
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
