package confidant

import (
	"testing"
	"time"
)

// TestProgressLine: done of the total with the percentage, the rate since the phase began and the
// time left at that rate; a count and rate only while the total is unknown (the scan); the total
// and time once the phase ends.
func TestProgressLine(t *testing.T) {
	for _, tc := range []struct {
		phase, unit string
		done, total int64
		elapsed     time.Duration
		final       bool
		want        string
	}{
		{"importing", "revisions", 12000, 500000, 60 * time.Second, false, "import: importing: 12000/500000 revisions (2%), 200 revisions/s, ETA 40m40s"},
		{"importing", "revisions", 0, 500000, time.Second, false, "import: importing: 0/500000 revisions (0%), 0 revisions/s, ETA unknown"},
		{"importing", "revisions", 500000, 500000, 41*time.Minute + 40*time.Second, true, "import: importing: 500000/500000 revisions in 41m40s, 200 revisions/s"},
		{"reading table confidant", "items", 3000, 0, 2 * time.Second, false, "import: reading table confidant: 3000 items, 1500 items/s"},
		{"reading table confidant", "items", 0, 0, 0, true, "import: reading table confidant: 0 items in 0s, 0 items/s"},
	} {
		if got := progressLine(tc.phase, tc.unit, tc.done, tc.total, tc.elapsed, tc.final); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
}
