// Package cluster is a small Kubernetes API client for the airlock binary,
// written without client-go (which stays in airlock-node): a kubeconfig's
// one context (Load), JSON REST on the few objects --engine kube needs
// (agent-sandbox's SandboxClaim and SandboxWarmPool, Pods), and pod exec
// through the API server over WebSocket (v5.channel.k8s.io).
//
// Rules:
//   - A kubeconfig setting the client cannot honour is refused, naming the
//     setting and the fix, never ignored: exec credential plugins,
//     auth-provider, basic auth, impersonation, proxies, a server without
//     TLS and insecure-skip-tls-verify.
//   - Every call takes ctx first; the API server's Status errors are
//     classified with errdefs (404 not found, 409 conflict or already
//     exists, 401, 403, 422 invalid, 5xx unavailable), with its message.
//   - An exec's outcome (its exit code) is a result, not an error; an
//     error means the exec could not be run or its end is unknown.
//   - No redirect is followed (a 3xx is an error naming its status), so
//     credentials reach the kubeconfig's server alone.
//   - Every answer is read up to a cap: maxBody, or PodLog's own, which
//     says when the log went on past it, and within the request timeout
//     (RequestTimeout, or WithRequestTimeout's), its body included.
//   - Text from the cluster put in an error is Printable: cut, and its
//     control characters escaped. A pod's or node's name from the cluster
//     is checked (CheckName) before its users record or show it.
//   - Exec never reads its Stdin after it returns.
//   - The files a kubeconfig names are trusted as kubectl trusts them (any
//     path the user can read), but each must be a regular file of at most
//     1 MiB.
package cluster
