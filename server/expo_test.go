package server

import (
	"bytes"
	"math"
	"slices"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The hand-written exposition parses as Prometheus' own parser reads it,
// with the values and labels put in.
func TestExposition(t *testing.T) {
	var e expo
	h := newHistogram([]float64{0.1, 1, 10})
	for _, v := range []float64{0.05, 0.1, 0.5, 3, 30, 30} {
		h.Observe(v)
	}
	h.write(&e, "t_seconds", "A histogram.\nTwo lines, one \\ backslash.")
	v := newCounterVec("a")
	v.Inc("b")
	v.Inc("b")
	v.Inc(`odd "name"` + "\n\\")
	v.write(&e, "t_total", "A counter.", "reason")
	e.family("t_gauge", "A gauge.", "gauge")
	e.sample("t_gauge", math.Inf(1))
	writeRuntime(&e)

	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(e.b.Bytes()))
	if err != nil {
		t.Fatalf("%v in:\n%s", err, e.b.String())
	}
	hist := fams["t_seconds"].GetMetric()[0].GetHistogram()
	var got []uint64
	for _, b := range hist.GetBucket() {
		got = append(got, b.GetCumulativeCount())
	}
	if want := []uint64{2, 3, 4, 6}; !slices.Equal(got, want) || hist.GetSampleCount() != 6 || hist.GetSampleSum() != 63.65 {
		t.Errorf("histogram: buckets %v (want %v), count %d, sum %v", got, want, hist.GetSampleCount(), hist.GetSampleSum())
	}
	counts := map[string]float64{}
	for _, m := range fams["t_total"].GetMetric() {
		counts[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
	}
	if len(counts) != 3 || counts["a"] != 0 || counts["b"] != 2 || counts[`odd "name"`+"\n\\"] != 1 {
		t.Errorf("counters by label: %v", counts)
	}
	if g := fams["t_gauge"].GetMetric()[0].GetGauge().GetValue(); !math.IsInf(g, 1) {
		t.Errorf("gauge %v", g)
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "process_open_fds", "process_cpu_seconds_total"} {
		if f := fams[name]; f == nil || len(f.GetMetric()) != 1 {
			t.Errorf("%s missing", name)
		}
	}
	if rss := fams["process_resident_memory_bytes"].GetMetric()[0].GetGauge().GetValue(); rss < 1<<20 {
		t.Errorf("resident memory %v bytes", rss)
	}
}
