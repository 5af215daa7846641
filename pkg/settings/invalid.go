package settings

// Validation errors name settings: a Config's Validate returns Invalid(flag, ...) and the table
// (Table.Explain) rewrites it to name the setting the way the user gave it. Flag "gateway-listen"
// is backed by the variable GANTRY_GATEWAY_LISTEN. The package imports nothing of gantry, so
// every package with a Config can use them.

import (
	"fmt"
	"net"
	"strings"
)

// EnvName returns the environment variable that backs a flag: the prefix, an underscore, and the flag
// name upper-cased with dashes turned into underscores.
func EnvName(prefix, flagName string) string {
	return prefix + "_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Describe names a setting the way error messages should: both its flag and its variable. A name
// that is already a variable (a member of a family such as ACM_PRIVATE_CA_ARN_<CA>) is itself.
func Describe(prefix, flagName string) string {
	if flagName == strings.ToUpper(flagName) {
		return flagName
	}
	return fmt.Sprintf("-%s (%s)", flagName, EnvName(prefix, flagName))
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
