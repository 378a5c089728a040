package proc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// clockTick is USER_HZ, the unit of /proc's CPU times: 100 a second on
// every Linux airlock runs on.
const clockTick = time.Second / 100

// HostCPU is the CPU time the host's CPUs together have spent busy since
// boot: every state of /proc/stat's "cpu" line but idle and iowait. Two
// readings apart measure what a stretch of work cost the whole machine,
// its kernel and every process included.
func HostCPU() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return ParseHostCPU(b)
}

// ParseHostCPU parses /proc/stat for HostCPU.
func ParseHostCPU(b []byte) (time.Duration, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	// cpu user nice system idle iowait irq softirq steal [guest guest_nice]
	if len(f) < 9 || string(f[0]) != "cpu" {
		return 0, fmt.Errorf("parsing /proc/stat: its first line %.80q is not the cpu totals", line)
	}
	var busy uint64
	for i, v := range f[1:9] {
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parsing /proc/stat's cpu line %.80q: %v", line, err)
		}
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return time.Duration(busy) * clockTick, nil
}
