package sim

import (
	"testing"
)

// BenchmarkScenarios measures simulation speed: simulated frames (as hosts
// sent them) and events per wall-clock second.
func BenchmarkScenarios(b *testing.B) {
	for _, name := range []string{"lossy-link", "incast", "scale"} {
		b.Run(name, func(b *testing.B) {
			sc, err := Load("../testdata/scenarios/" + name + ".json")
			if err != nil {
				b.Fatal(err)
			}
			var frames, events uint64
			for i := 0; i < b.N; i++ {
				res, err := Run(sc, uint64(i+1))
				if err != nil {
					b.Fatal(err)
				}
				if !res.OK() {
					b.Fatalf("seed %d:\n%s", i+1, res.Failures())
				}
				frames += res.Network.Sent
				events += res.Events
			}
			b.ReportMetric(float64(frames)/b.Elapsed().Seconds(), "frames/s")
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
