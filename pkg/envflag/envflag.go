// Package envflag lets environment variables fill the flags a command line did not set, so the same
// settings work as flags locally and as environment in containers: flag "gateway-listen" is read from
// GANTRY_GATEWAY_LISTEN.
package envflag

import (
	"flag"
	"fmt"
	"net"
	"strings"
)

// EnvName returns the environment variable that backs a flag: the prefix, an underscore, and the flag
// name upper-cased with dashes turned into underscores.
func EnvName(prefix, flagName string) string {
	return prefix + "_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Describe names a setting the way error messages should: both its flag and its variable.
func Describe(prefix, flagName string) string {
	return fmt.Sprintf("-%s (%s)", flagName, EnvName(prefix, flagName))
}

// Apply sets every flag of fs that was not given on the command line from its environment variable,
// when that variable is set. lookup is os.LookupEnv in production and a map in tests. Call it after
// fs.Parse.
func Apply(fs *flag.FlagSet, prefix string, lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] {
			return
		}
		v, ok := lookup(EnvName(prefix, f.Name))
		if !ok {
			return
		}
		if setErr := fs.Set(f.Name, v); setErr != nil {
			err = fmt.Errorf("%s: invalid value %q: %w", Describe(prefix, f.Name), v, setErr)
		}
	})
	return err
}

// Prefix is the environment prefix of gantry's own settings.
const Prefix = "GANTRY"

// SettingError reports a bad value of one setting, naming its flag and environment variable.
type SettingError struct {
	Flag string
	Err  error
}

func (e *SettingError) Error() string { return Describe(Prefix, e.Flag) + ": " + e.Err.Error() }

func (e *SettingError) Unwrap() error { return e.Err }

// Invalid returns a SettingError for flagName with a formatted reason.
func Invalid(flagName, format string, args ...any) error {
	return &SettingError{Flag: flagName, Err: fmt.Errorf(format, args...)}
}

// CheckHostPort returns a SettingError unless value is a host:port listen or dial address.
func CheckHostPort(flagName, value string) error {
	if _, port, err := net.SplitHostPort(value); err != nil || port == "" {
		return Invalid(flagName, "%q is not host:port", value)
	}
	return nil
}
