// Package netns makes the network of one sandbox that asks for egress:
// two network namespaces of airlock's own, the sandbox's and its proxy's,
// joined by one veth pair and holding nothing else.
//
// Rules:
//   - The pair is the sandbox's only network: the sandbox's end has
//     SandboxAddr, the proxy's end ProxyAddr, on one /30, with no default
//     route and no other interface but loopback on either side. Every
//     sandbox has the same two addresses, since each pair lives only
//     between its own two namespaces: nothing is allocated, and no address
//     is ever added to the host.
//   - The proxy's end is a namespace of its own, not the host, so that a
//     sandbox whose kernel routes to its peer on any port (runc) finds
//     there only the proxy's listener (Listen), never a host service.
//   - Both namespaces are bind-mounted under a directory of airlock's
//     (`<id>.sandbox`, `<id>.proxy`), so that a crashed owner's are found
//     (List) and removed (Remove) by the reaper. A namespace ends when its
//     mount, the last process in it and the last socket in it are gone;
//     the pair ends with either.
//   - Create is all or nothing: a failure removes what it made.
package netns
