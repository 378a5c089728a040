// Package egress is a sandbox's way out to the network when it asks for
// one: an allowlist of hosts and ports, and a proxy that enforces it for
// one sandbox on a listener it is given. The oci engine serves one per
// sandbox that asks for egress (docs/egress.md).
//
// The rules:
//   - Everything that arrives on the proxy's listener is hostile: request
//     lines and headers are read under a byte cap and a deadline, a request
//     that is not plainly HTTP/1 is refused, and a refusal closes the
//     connection. Nothing the sandbox sends makes the proxy panic or wait
//     without bound.
//   - The allowlist names hosts, but the proxy checks the address it
//     connects to. It resolves names itself (a sandbox has no DNS) and
//     dials only addresses that are public and not the host's own (read
//     at New), or that the allowlist names exactly as IP literals with
//     that port: a listed name that resolves to
//     loopback, a private, link-local or metadata address is refused
//     (DNS rebinding). An IP literal from the sandbox is allowed only when
//     that literal is on the list.
//   - Ports are part of the rule: an entry without a port allows 443 and 80
//     only.
//   - Per sandbox, the bytes through the proxy (both ways, every
//     connection) and the connections open at once are capped, and a
//     connection with no traffic either way for the idle timeout is closed.
//     A byte is taken from the budget before it passes, never after, so
//     no more than the cap passes; a tunnel's bytes, spliced on Linux,
//     are taken per move, only as many as have arrived.
//   - Every connection the sandbox opens (a CONNECT tunnel, or one
//     forwarded HTTP request) is one audit Record: host, port, the address
//     dialled, bytes each way, allowed or refused and why. A Record never
//     holds a path, a header or a body. When the audit sink fails the proxy
//     stops: no traffic goes unrecorded.
//   - CONNECT tunnels are opaque: TLS runs end to end between the sandbox
//     and the host, and the proxy never sees inside.
//   - A credential route (Route) is bound to its host. The sandbox speaks
//     plain HTTP to http://HOST/ through the proxy; the proxy opens TLS to
//     HOST itself, verifies its certificate, and sets the route's header.
//     Redirects are passed back, never followed, so the header is sent to
//     HOST and nowhere else. A route allows its host by itself, through
//     the route only; the address rules apply to it as to any name. The value never appears in a Record, an error
//     or a Route's printed form. An upstream that echoes the header back
//     hands it to the sandbox: trusting a host with a credential includes
//     trusting it not to do that.
//   - The proxy resolves nothing for the sandbox: a DNS query it is sent
//     (ServeDNS) is answered REFUSED and recorded.
//   - Parse errors are *Error (invalid input, errdefs.IsInvalidArgument)
//     and say what to give instead.
package egress
