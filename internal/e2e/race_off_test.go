//go:build !race

package e2e

// raceDetector tells tests whether the race detector instruments this build.
const raceDetector = false
