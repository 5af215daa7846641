package secrets

import (
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gantry-dev/gantry/pkg/credpair"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// This file converts between the API's protobuf messages and the domain types, so neither side
// leaks into the other.

func optString(s *string) *wrapperspb.StringValue {
	if s == nil {
		return nil
	}
	return wrapperspb.String(*s)
}

func optTime(t *time.Time) *wrapperspb.StringValue {
	if t == nil {
		return nil
	}
	return wrapperspb.String(FormatTime(*t))
}

func optInt32(v *wrapperspb.Int32Value) *int32 {
	if v == nil {
		return nil
	}
	n := v.GetValue()
	return &n
}

func nextPage(token string) *wrapperspb.StringValue {
	if token == "" {
		return nil
	}
	return wrapperspb.String(token)
}

// pageToken accepts the token under either of its names; Confidant's UI sends "page".
func pageToken(nextPage, page string) string {
	if nextPage != "" {
		return nextPage
	}
	return page
}

func credentialToPB(v *CredentialView) *secretsv1.Credential {
	r := v.Record
	pairs := v.Pairs
	if pairs == nil {
		pairs = credpair.Map{}
	}
	metadata := r.Metadata
	if metadata == nil {
		metadata = map[string]string{}
	}
	keys := r.Keys
	if keys == nil {
		keys = []string{}
	}
	tags := r.Tags
	if tags == nil {
		tags = []string{}
	}
	return &secretsv1.Credential{
		Id:                  r.ID,
		Name:                r.Name,
		CredentialKeys:      keys,
		CredentialPairs:     credpair.Texts(pairs),
		CredentialPairsJson: credpair.TypedJSONTexts(pairs),
		Metadata:            metadata,
		Revision:            r.Revision,
		Enabled:             r.Enabled,
		Documentation:       optString(r.Documentation),
		ModifiedDate:        FormatTime(r.ModifiedDate),
		ModifiedBy:          r.ModifiedBy,
		Permissions:         v.Permissions,
		Tags:                tags,
		LastDecryptedDate:   optTime(r.LastDecryptedDate),
		LastRotationDate:    optTime(r.LastRotationDate),
		NextRotationDate:    optTime(v.NextRotation),
	}
}

// historyCredentialToPB renders a history record with Confidant's <id>-<revision> id.
func historyCredentialToPB(v *CredentialView) *secretsv1.Credential {
	pb := credentialToPB(v)
	pb.Id = historyID(v.Record.ID, v.Record.Revision)
	return pb
}

func historyID(id string, revision int32) string {
	return id + "-" + itoa(revision)
}

func itoa(n int32) string {
	return strconv.FormatInt(int64(n), 10)
}

func credentialsToPB(views []*CredentialView, history bool) []*secretsv1.Credential {
	out := make([]*secretsv1.Credential, len(views))
	for i, v := range views {
		if history {
			out[i] = historyCredentialToPB(v)
		} else {
			out[i] = credentialToPB(v)
		}
	}
	return out
}

// serviceToPB renders a service. Single-service responses (expanded) carry the mapped credentials;
// list and history responses carry empty lists, as Confidant's do. blind_credentials is always empty:
// gantry stores no blind credentials, so a blind id stored by an earlier version has nothing to render,
// and an entry without its metadata.context and data_key would crash python-confidant-client's
// get_service (which decrypts each entry).
func serviceToPB(v *ServiceView, history, expanded bool) *secretsv1.Service {
	r := v.Record
	id := r.ID
	if history {
		id = historyID(r.ID, r.Revision)
	}
	creds := []*secretsv1.Credential{}
	if expanded {
		creds = credentialsToPB(v.Credentials, false)
	}
	perms := v.Permissions
	if perms == nil {
		perms = map[string]bool{}
	}
	return &secretsv1.Service{
		Id:               id,
		Revision:         r.Revision,
		Enabled:          r.Enabled,
		ModifiedDate:     FormatTime(r.ModifiedDate),
		ModifiedBy:       r.ModifiedBy,
		Account:          optString(r.Account),
		Credentials:      creds,
		BlindCredentials: []*secretsv1.BlindCredential{},
		Permissions:      perms,
	}
}

func servicesToPB(views []*ServiceView, history bool) []*secretsv1.Service {
	out := make([]*secretsv1.Service, len(views))
	for i, v := range views {
		out[i] = serviceToPB(v, history, false)
	}
	return out
}

// A diff holds only the fields that differ (the spec: "each differing field maps to an object with
// added and removed"): a map, so the marshaller, which emits every unset message field as null, has no
// unchanged field to emit.
type diffChanges map[string]*secretsv1.FieldChange

func (c diffChanges) field(name string, d *FieldDiff) {
	if d == nil {
		return
	}
	added, _ := structpb.NewValue(d.Added)
	removed, _ := structpb.NewValue(d.Removed)
	c[name] = &secretsv1.FieldChange{Added: added, Removed: removed}
}

func (c diffChanges) keys(name string, d *KeysDiff) {
	if d == nil {
		return
	}
	c[name] = &secretsv1.FieldChange{Added: stringList(d.Added), Removed: stringList(d.Removed)}
}

func stringList(items []string) *structpb.Value {
	values := make([]*structpb.Value, len(items))
	for i, item := range items {
		values[i] = structpb.NewStringValue(item)
	}
	return structpb.NewListValue(&structpb.ListValue{Values: values})
}

func credentialDiffToPB(d *CredentialDiff) map[string]*secretsv1.FieldChange {
	c := diffChanges{}
	c.field("name", d.Name)
	c.keys("credential_pairs", d.Pairs)
	c.keys("metadata", d.Metadata)
	c.field("enabled", d.Enabled)
	c.field("documentation", d.Documentation)
	c.field("modified_by", d.ModifiedBy)
	c.field("modified_date", d.ModifiedDate)
	c.keys("tags", d.Tags)
	c.field("last_rotation_date", d.LastRotationDate)
	return c
}

func serviceDiffToPB(d *ServiceDiff) map[string]*secretsv1.FieldChange {
	c := diffChanges{}
	c.field("enabled", d.Enabled)
	c.keys("credentials", d.Credentials)
	c.keys("blind_credentials", d.BlindCredentials)
	c.field("account", d.Account)
	c.field("modified_by", d.ModifiedBy)
	c.field("modified_date", d.ModifiedDate)
	return c
}

func structMap(s *structpb.Struct) map[string]any {
	if s == nil {
		return nil
	}
	return s.AsMap()
}

func optBool(v *wrapperspb.BoolValue) *bool {
	if v == nil {
		return nil
	}
	b := v.GetValue()
	return &b
}

func optStr(v *wrapperspb.StringValue) *string {
	if v == nil {
		return nil
	}
	s := v.GetValue()
	return &s
}

// tagsFromList converts a JSON list of tags; anything but strings is refused.
func tagsFromList(l *structpb.ListValue) ([]string, error) {
	out := []string{}
	for _, v := range l.GetValues() {
		s, ok := v.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return nil, invalid("tags must be a list of strings")
		}
		out = append(out, s.StringValue)
	}
	return out, nil
}

func clientConfigToPB(c *ClientConfig) *secretsv1.GetClientConfigResponse {
	defined, err := structpb.NewStruct(c.Defined)
	if err != nil || defined == nil {
		defined = &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	var historyLimit *wrapperspb.Int32Value
	if c.HistoryPageLimit > 0 {
		historyLimit = wrapperspb.Int32(int32(min(c.HistoryPageLimit, maxPageLimit)))
	}
	accounts := c.Accounts
	if accounts == nil {
		accounts = []string{}
	}
	return &secretsv1.GetClientConfigResponse{
		Defined: defined,
		Generated: &secretsv1.GeneratedClientConfig{
			KeyAuthManageGrants: c.KMSAuthManageGrants,
			KmsAuthManageGrants: c.KMSAuthManageGrants,
			CloudAccounts:       accounts,
			AwsAccounts:         accounts,
			XsrfCookieName:      c.XSRFCookieName,
			MaintenanceMode:     c.MaintenanceMode,
			HistoryPageLimit:    historyLimit,
			DefinedTags:         c.DefinedTags,
			Permissions: &secretsv1.ClientPermissions{
				List:                   c.CredentialsList && c.ServicesList,
				Create:                 c.CredentialsCreate && c.ServicesCreate,
				Credentials:            &secretsv1.ResourcePermissions{List: c.CredentialsList, Create: c.CredentialsCreate},
				Services:               &secretsv1.ResourcePermissions{List: c.ServicesList, Create: c.ServicesCreate},
				BlindCredentials:       &secretsv1.ResourcePermissions{List: true, Create: true},
				CertificateAuthorities: &secretsv1.ResourcePermissions{List: c.CAsList},
			},
		},
	}
}
