// Package cluster builds, starts and stops a Kubernetes control plane for
// tests on this machine: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and the agent-sandbox controller with its extensions, all
// built from the Go modules pinned beside this package.
//
// Its rules:
//   - Everything it writes lives under <root>/kube, root being airlock's
//     root: the built binaries in bin/, keyed by a hash of their module's
//     go.sum, and the runtime state (certificates, keys, kubeconfigs, etcd's
//     data, logs, pid files) in run/, with the admin kubeconfig at
//     <root>/kube/kubeconfig. Key and kubeconfig files are 0600.
//   - Every process listens on 127.0.0.1 only, on ports picked free when
//     the control plane starts and recorded in run/ports.
//   - No kubelet and no pod network: nothing here changes a host sysctl,
//     mounts anything or routes a packet.
//   - Down stops exactly the processes whose pids Up recorded, and only when
//     /proc still shows them running a binary from bin/; it then removes
//     run/ and the kubeconfig, and keeps bin/ (Clean removes that too).
package cluster
