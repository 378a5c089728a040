package server

// A Prometheus text exposition (format 0.0.4) of the few series the
// server keeps. It is written by hand: the client library's package
// initialisation cost every airlock command, `run` and `exec` included,
// about 1.5 ms of process start.

import (
	"bytes"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/proc"
)

// expo writes metric families.
type expo struct{ b bytes.Buffer }

// family starts a family: its HELP and TYPE lines.
func (e *expo) family(name, help, typ string) {
	e.b.WriteString("# HELP " + name + " " + helpEscaper.Replace(help) + "\n")
	e.b.WriteString("# TYPE " + name + " " + typ + "\n")
}

// sample writes one sample; labels are name, value pairs.
func (e *expo) sample(name string, v float64, labels ...string) {
	e.b.WriteString(name)
	if len(labels) > 0 {
		e.b.WriteByte('{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				e.b.WriteByte(',')
			}
			e.b.WriteString(labels[i] + `="` + labelEscaper.Replace(labels[i+1]) + `"`)
		}
		e.b.WriteByte('}')
	}
	e.b.WriteByte(' ')
	e.b.WriteString(formatValue(v))
	e.b.WriteByte('\n')
}

// histogram writes a histogram's cumulative buckets, sum and count.
func (e *expo) histogram(name string, bounds []float64, counts []uint64, sum float64, labels ...string) {
	var cum uint64
	for i, le := range bounds {
		cum += counts[i]
		e.sample(name+"_bucket", float64(cum), append(append([]string{}, labels...), "le", formatValue(le))...)
	}
	total := cum
	if len(counts) > len(bounds) {
		total += counts[len(bounds)]
	}
	e.sample(name+"_bucket", float64(total), append(append([]string{}, labels...), "le", "+Inf")...)
	e.sample(name+"_sum", sum, labels...)
	e.sample(name+"_count", float64(total), labels...)
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
)

func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// counterVec is a counter per value of one label.
type counterVec struct {
	mu sync.Mutex
	by map[string]uint64
}

func newCounterVec(values ...string) *counterVec {
	v := &counterVec{by: map[string]uint64{}}
	for _, s := range values {
		v.by[s] = 0
	}
	return v
}

func (v *counterVec) Inc(value string) {
	v.mu.Lock()
	v.by[value]++
	v.mu.Unlock()
}

func (v *counterVec) write(e *expo, name, help, label string) {
	v.mu.Lock()
	keys := make([]string, 0, len(v.by))
	for k := range v.by {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	vals := make([]uint64, len(keys))
	for i, k := range keys {
		vals[i] = v.by[k]
	}
	v.mu.Unlock()
	e.family(name, help, "counter")
	for i, k := range keys {
		e.sample(name, float64(vals[i]), label, k)
	}
}

// histogram counts observations into fixed buckets.
type histogram struct {
	bounds []float64
	mu     sync.Mutex
	counts []uint64 // one per bound, then one past the last
	sum    float64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) Observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v) // the first bound ≥ v
	h.mu.Lock()
	h.counts[i]++
	h.sum += v
	h.mu.Unlock()
}

func (h *histogram) write(e *expo, name, help string) {
	h.mu.Lock()
	counts, sum := append([]uint64(nil), h.counts...), h.sum
	h.mu.Unlock()
	e.family(name, help, "histogram")
	e.histogram(name, h.bounds, counts, sum)
}

// writeRuntime writes the server process's own gauges, to watch it for
// leaks: goroutines and Go memory, resident memory, open descriptors and
// CPU time (from /proc/self where the kernel has it).
func writeRuntime(e *expo) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	e.family("go_goroutines", "Number of goroutines that currently exist.", "gauge")
	e.sample("go_goroutines", float64(runtime.NumGoroutine()))
	e.family("go_memstats_heap_alloc_bytes", "Number of heap bytes allocated and still in use.", "gauge")
	e.sample("go_memstats_heap_alloc_bytes", float64(ms.HeapAlloc))
	e.family("go_memstats_sys_bytes", "Number of bytes obtained from the system.", "gauge")
	e.sample("go_memstats_sys_bytes", float64(ms.Sys))
	e.family("go_gc_cycles_total", "Completed GC cycles.", "counter")
	e.sample("go_gc_cycles_total", float64(ms.NumGC))
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			if pages, err := strconv.ParseUint(f[1], 10, 64); err == nil {
				e.family("process_resident_memory_bytes", "Resident memory size in bytes.", "gauge")
				e.sample("process_resident_memory_bytes", float64(pages*uint64(os.Getpagesize())))
			}
		}
	}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		e.family("process_open_fds", "Number of open file descriptors.", "gauge")
		e.sample("process_open_fds", float64(len(fds)))
	}
	if st, err := proc.ReadStat(os.Getpid()); err == nil {
		// utime and stime are in clock ticks (100/s).
		e.family("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", "counter")
		e.sample("process_cpu_seconds_total", float64(st.Utime+st.Stime)/100)
	}
	e.family("process_start_time_seconds", "Start time of the process since the Unix epoch in seconds.", "gauge")
	e.sample("process_start_time_seconds", float64(processStart.UnixNano())/1e9)
}

var processStart = time.Now()
