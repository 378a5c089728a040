package egress

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// KindDNS is a DNS query the sandbox sent to the proxy's address.
const KindDNS = "dns"

// ReasonDNS is why every DNS query is refused: the sandbox has no DNS,
// the proxy resolves the names it allows itself.
const ReasonDNS = "dns_refused"

// ServeDNS answers every DNS query that arrives on pc with REFUSED and
// records it (KindDNS, ReasonDNS, the name asked when it is a valid host
// name), until ctx is done; then it closes pc. Nothing is resolved and
// nothing is forwarded: it is there so that a DNS attempt is answered at
// once and audited rather than lost. A packet that is not a query is
// dropped unanswered, and recorded as a bad request.
func (p *Proxy) ServeDNS(ctx context.Context, pc net.PacketConn) error {
	defer context.AfterFunc(ctx, func() { pc.Close() })()
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		start := time.Now()
		rec := Record{Time: start, Kind: KindDNS, Port: 53, Reason: ReasonDNS}
		answer, host, ok := refuseQuery(buf[:n])
		rec.Host = host
		if !ok {
			rec.Reason = ReasonBadRequest
		} else {
			pc.SetWriteDeadline(time.Now().Add(time.Second))
			pc.WriteTo(answer, from)
		}
		p.record(rec)
	}
}

// refuseQuery is the REFUSED answer to the DNS query q, with its question,
// and the name it asks for when that is a valid host name. ok is false
// when q is not a query.
func refuseQuery(q []byte) (answer []byte, host string, ok bool) {
	var parser dnsmessage.Parser
	h, err := parser.Start(q)
	if err != nil || h.Response {
		return nil, "", false
	}
	qs, err := parser.AllQuestions()
	if err != nil || len(qs) > 1 {
		return nil, "", false
	}
	if len(qs) == 1 {
		if name, err := normalizeName(strings.TrimSuffix(qs[0].Name.String(), ".")); err == nil {
			host = name
		}
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{
		ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RCode: dnsmessage.RCodeRefused,
	})
	if err := b.StartQuestions(); err != nil {
		return nil, "", false
	}
	for _, question := range qs {
		if err := b.Question(question); err != nil {
			return nil, "", false
		}
	}
	answer, err = b.Finish()
	if err != nil {
		return nil, "", false
	}
	return answer, host, true
}
