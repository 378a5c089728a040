// Command egress measures the egress proxy on loopback beside direct
// connections, interleaved in one run so that the ratios hold on a noisy
// machine:
//
//   - a large GET over plain HTTP: direct, and forwarded by the proxy;
//   - the same over HTTPS: direct, and through a CONNECT tunnel;
//   - a 1 KiB GET on a kept connection, plain HTTP (the proxy opens a
//     connection to the host per request), and over HTTPS on a new
//     connection each time (CONNECT and a TLS handshake per request);
//   - as root, a large GET (100 MiB) from inside a pair of namespaces
//     made as the oci engine makes a sandbox's: direct to a server in the
//     proxy's namespace over the veth pair, and through the proxy there
//     to a server on the host's loopback (netns_linux.go);
//   - as root, after setup, the same GETs made by Python's urllib in a
//     real sandbox of the oci engine, under gVisor and under runc: direct
//     to servers in its proxy's namespace, and through its own proxy to
//     the host's twins (sandbox_linux.go). No CPU is given for these: the
//     client's is the sandbox's.
//
// Each row has the wall time of a round and the CPU the whole process
// used in it (servers, proxy and client, user and system): where the
// CPUs are fewer than the busy parties, the CPU is what sets the pace.
//
// Nothing leaves the machine: the servers, the proxy and the clients are
// on 127.0.0.1, or in the namespaces and sandboxes it makes and removes. `make
// bench-egress` runs it.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/timing"
)

func main() {
	n := flag.Int("n", 20, "rounds of each scenario")
	nsSize := flag.Int("ns-size", 100, "MiB per large GET in the namespaces and the sandboxes (0: none; root only)")
	sandboxN := flag.Int("sandbox-n", 12, "rounds of the sandboxes' large GETs (0: none; root, after make setup)")
	size := flag.Int("size", 64, "MiB per large GET")
	small := flag.Int("small", 200, "1 KiB GETs per round of the small scenarios")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (servers, proxy and clients) to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench-egress: %v\n", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*n, *size<<20, *small, *nsSize<<20, *sandboxN); err != nil {
		fmt.Fprintf(os.Stderr, "bench-egress: %v\n", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// get is a scenario's work: times GETs of u, each read to the end.
func get(c *http.Client, u string, times int) func() error {
	return func() error {
		for range times {
			resp, err := c.Get(u)
			if err != nil {
				return err
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
		}
		return nil
	}
}

type scenario struct {
	name  string
	bytes int // per round; 0 for the latency scenarios
	reqs  int
	fn    func() error
	took  []time.Duration
	cpu   []time.Duration // the process's: servers, proxy and client
	noCPU bool            // the client is in a sandbox: its CPU is not the process's
}

// cpuTime is the CPU this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func run(n, size, small, nsSize, sandboxN int) error {
	blob := bytes.Repeat([]byte("airlock egress "), size/15+1)[:size]
	kib := blob[:1024]
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := kib
		if r.URL.Path == "/blob" {
			b = blob
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	})
	plain := httptest.NewServer(handler)
	defer plain.Close()
	secure := httptest.NewTLSServer(handler)
	defer secure.Close()

	var allow []string
	for _, s := range []string{plain.URL, secure.URL} {
		u, _ := url.Parse(s)
		allow = append(allow, u.Host)
	}
	list, err := egress.ParseAllowlist(allow)
	if err != nil {
		return err
	}
	var records atomic.Int64
	p, err := egress.New("bench", list, func(egress.Record) error { records.Add(1); return nil },
		egress.WithLimits(egress.Limits{Bytes: 1 << 62, Conns: 64}))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()

	proxyURL := &url.URL{Scheme: "http", Host: ln.Addr().String()}
	tlsConf := secure.Client().Transport.(*http.Transport).TLSClientConfig
	client := func(proxied, keep bool) *http.Client {
		tr := &http.Transport{TLSClientConfig: tlsConf.Clone(), DisableKeepAlives: !keep, DisableCompression: true}
		if proxied {
			tr.Proxy = http.ProxyURL(proxyURL)
		}
		return &http.Client{Transport: tr}
	}
	scenarios := []*scenario{
		{name: "http GET, direct", bytes: size, fn: get(client(false, true), plain.URL+"/blob", 1)},
		{name: "http GET, proxy", bytes: size, fn: get(client(true, true), plain.URL+"/blob", 1)},
		{name: "https GET, direct", bytes: size, fn: get(client(false, true), secure.URL+"/blob", 1)},
		{name: "https GET, CONNECT", bytes: size, fn: get(client(true, true), secure.URL+"/blob", 1)},
		{name: "1 KiB http, kept, direct", reqs: small, fn: get(client(false, true), plain.URL+"/kib", small)},
		{name: "1 KiB http, kept, proxy", reqs: small, fn: get(client(true, true), plain.URL+"/kib", small)},
		{name: "1 KiB https, new conn, direct", reqs: small, fn: get(client(false, false), secure.URL+"/kib", small)},
		{name: "1 KiB https, new conn, CONNECT", reqs: small, fn: get(client(true, false), secure.URL+"/kib", small)},
	}
	// The namespaces' and the sandboxes' large GETs share one body.
	nsBlob := bytes.Repeat([]byte("airlock egress "), nsSize/15+1)[:nsSize]
	nsHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(nsBlob)))
		w.Write(nsBlob)
	})
	if nsSize > 0 {
		ns, stop, err := inNamespaces(nsHandler, nsSize)
		if err != nil {
			return fmt.Errorf("the namespaces' scenarios (-ns-size 0 leaves them out): %w", err)
		}
		defer stop()
		scenarios = append(scenarios, ns...)
	}
	var boxed []*scenario
	if nsSize > 0 && sandboxN > 0 {
		// Before the interleaved rounds: the sandboxes take their rounds
		// in turns of their own.
		boxed, err = inSandboxes(nsHandler, nsSize, sandboxN)
		if err != nil {
			return fmt.Errorf("the sandboxes' scenarios (-sandbox-n 0 leaves them out): %w", err)
		}
	}
	for _, s := range scenarios { // warm up
		if err := s.fn(); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	for range n {
		for _, s := range scenarios {
			start, cpu := time.Now(), cpuTime()
			if err := s.fn(); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			s.took = append(s.took, time.Since(start))
			s.cpu = append(s.cpu, cpuTime()-cpu)
		}
	}

	scenarios = append(scenarios, boxed...)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "scenario\tp50\tp99\tthroughput or per request (p50)\tvs direct\tCPU (p50)\tvs direct\t\n")
	var direct, directCPU time.Duration
	for i, s := range scenarios {
		p50, p99 := timing.Percentile(s.took, 50), timing.Percentile(s.took, 99)
		var per string
		if s.bytes > 0 {
			per = fmt.Sprintf("%.0f MiB/s", float64(s.bytes)/(1<<20)/p50.Seconds())
		} else {
			per = fmt.Sprintf("%.0f µs, %.0f/s", float64(p50.Microseconds())/float64(s.reqs), float64(s.reqs)/p50.Seconds())
		}
		cpu := timing.Percentile(s.cpu, 50)
		ratio, cpuRatio := "", ""
		if i%2 == 0 {
			direct, directCPU = p50, cpu
		} else {
			ratio = fmt.Sprintf("%.2f×", p50.Seconds()/direct.Seconds())
			cpuRatio = fmt.Sprintf("%.2f×", cpu.Seconds()/directCPU.Seconds())
		}
		cpuCell := fmt.Sprintf("%.0f ms", timing.MS(cpu))
		if s.noCPU {
			cpuCell, cpuRatio = "—", ""
		}
		fmt.Fprintf(tw, "%s\t%.1f ms\t%.1f ms\t%s\t%s\t%s\t%s\t\n", s.name, timing.MS(p50), timing.MS(p99), per, ratio, cpuCell, cpuRatio)
	}
	tw.Flush()
	cancel()
	<-done
	done <- nil
	fmt.Printf("%d rounds; the proxy wrote %d audit records\n", n, records.Load())
	return nil
}
