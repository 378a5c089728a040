package isolation

import (
	"os"
	"testing"
)

// TestMain fixes the host's thermal_throttle directories, so that the
// golden specs are the same on every host and show them masked.
func TestMain(m *testing.M) {
	hostThermal = func() []string { return []string{"/sys/devices/system/cpu/cpu0/thermal_throttle"} }
	os.Exit(m.Run())
}
