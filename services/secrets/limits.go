package secrets

import (
	"fmt"

	"github.com/gantry-dev/gantry/pkg/credpair"
	"github.com/gantry-dev/gantry/pkg/settings"
)

// LimitError refuses a write whose content exceeds one of the configured Limits: a 400 naming the
// limit and the setting that raises it. Nothing is stored.
type LimitError struct {
	// What is exceeded, as the client sent it, e.g. "credential_pairs has 1001 pairs".
	What string
	// Max is the configured maximum and Unit what it counts ("pairs", "bytes").
	Max  int
	Unit string
	// Flag is the setting (flag name; its variable is GANTRY_<FLAG>) that holds Max.
	Flag string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s; the limit is %d %s (set by %s)", e.What, e.Max, e.Unit, settingName(e.Flag))
}

// settingName names a gantry setting for an error message: its flag and its variable.
func settingName(flagName string) string {
	return "-" + flagName + " or " + settings.EnvName(settings.Prefix, flagName)
}

// checkPairs holds normalised credential pairs to the pair-count, key and value limits. Keys are
// checked in sorted order so the same request always gets the same answer; a value is never quoted.
func (l Limits) checkPairs(pairs credpair.Map) error {
	if n := len(pairs); n > l.MaxCredentialPairs {
		return &LimitError{What: fmt.Sprintf("credential_pairs has %d pairs", n), Max: l.MaxCredentialPairs, Unit: "pairs", Flag: flagMaxCredentialPairs}
	}
	for _, k := range sortedKeys(pairs) {
		if n := len(k); n > l.MaxCredentialKeyBytes {
			return &LimitError{What: fmt.Sprintf("a credential_pairs key is %d bytes long", n), Max: l.MaxCredentialKeyBytes, Unit: "bytes", Flag: flagMaxCredentialKeyBytes}
		}
		if n := len(pairs[k].Text()); n > l.MaxCredentialValueBytes {
			return &LimitError{What: fmt.Sprintf("the value of credential_pairs key %q is %d bytes long", k, n), Max: l.MaxCredentialValueBytes, Unit: "bytes", Flag: flagMaxCredentialValueBytes}
		}
	}
	return nil
}

// checkMetadata holds a credential's metadata to its size limit: every key and value, in bytes.
func (l Limits) checkMetadata(metadata map[string]string) error {
	size := 0
	for k, v := range metadata {
		size += len(k) + len(v)
	}
	if size > l.MaxCredentialMetadataBytes {
		return &LimitError{What: fmt.Sprintf("metadata is %d bytes (keys and values)", size), Max: l.MaxCredentialMetadataBytes, Unit: "bytes", Flag: flagMaxCredentialMetadataBytes}
	}
	return nil
}

// checkServiceCredentials holds a service's mapping (deduplicated ids) to the credentials-per-service
// limit.
func (l Limits) checkServiceCredentials(credentials, blindCredentials []string) error {
	if n := len(credentials) + len(blindCredentials); n > l.MaxServiceCredentials {
		return &LimitError{What: fmt.Sprintf("the service maps %d credentials (credentials and blind_credentials together)", n),
			Max: l.MaxServiceCredentials, Unit: "credentials", Flag: flagMaxServiceCredentials}
	}
	return nil
}

// CheckCredential holds a credential's pairs and metadata to the limits a write through the API
// is held to (nil when within them): the Confidant import reports each record it carries over
// beyond them, which the API would refuse to write again as it is.
func (l Limits) CheckCredential(pairs credpair.Map, metadata map[string]string) error {
	if err := l.checkPairs(pairs); err != nil {
		return err
	}
	return l.checkMetadata(metadata)
}

// CheckService holds a service's mappings to the credentials-per-service limit (see
// CheckCredential).
func (l Limits) CheckService(credentials, blindCredentials []string) error {
	return l.checkServiceCredentials(credentials, blindCredentials)
}
