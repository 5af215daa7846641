// Package buildinfo reports the version and commit the binary was built from, for /server_info and
// `gantry version`.
package buildinfo

import "runtime/debug"

// Set by the linker: -ldflags "-X github.com/gantry-dev/gantry/pkg/buildinfo.Version=..." .
var (
	Version   = "dev"
	Commit    = ""
	BuildType = "RELEASE"
)

// ShortCommit returns the first six hex digits of the commit, from the linker flag or the Go build
// information, or "000000" when neither knows it.
func ShortCommit() string {
	c := Commit
	if c == "" {
		if info, ok := debug.ReadBuildInfo(); ok {
			for _, s := range info.Settings {
				if s.Key == "vcs.revision" {
					c = s.Value
				}
			}
		}
	}
	if len(c) < 6 {
		return "000000"
	}
	return c[:6]
}
