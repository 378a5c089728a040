package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
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
func (p *Proxy) ServeDNS(ctx context.Context, pc net.PacketConn) (err error) {
	defer func() {
		if ferr := p.flushRefusals(); ferr != nil && err == nil {
			err = fmt.Errorf("writing sandbox %q's egress audit: %w", p.id, ferr)
		}
	}()
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
// when q is not a query: shorter than a header, a response, more than one
// question, or a question that does not parse (a compressed name
// included: a query has nothing to point back to).
func refuseQuery(q []byte) (answer []byte, host string, ok bool) {
	const headerLen = 12
	if len(q) < headerLen {
		return nil, "", false
	}
	flags := binary.BigEndian.Uint16(q[2:4])
	qdcount := binary.BigEndian.Uint16(q[4:6])
	if flags&0x8000 != 0 || qdcount > 1 {
		return nil, "", false
	}
	end := headerLen
	if qdcount == 1 {
		var labels []string
		for {
			if end >= len(q) {
				return nil, "", false
			}
			n := int(q[end])
			end++
			if n == 0 {
				break
			}
			if n > 63 || end+n > len(q) || end-headerLen > 255 {
				return nil, "", false
			}
			labels = append(labels, string(q[end:end+n]))
			end += n
		}
		if end+4 > len(q) { // type and class
			return nil, "", false
		}
		end += 4
		if name, err := normalizeName(strings.Join(labels, ".")); err == nil {
			host = name
		}
	}
	answer = make([]byte, end)
	copy(answer, q[:end])
	// QR, the query's opcode and RD, RCODE 5 (REFUSED); its questions,
	// no other records.
	binary.BigEndian.PutUint16(answer[2:4], 0x8000|flags&0x7800|flags&0x0100|5)
	clear(answer[6:12])
	return answer, host, true
}
