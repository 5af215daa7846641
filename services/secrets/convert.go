package secrets

import (
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

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
		pairs = map[string]string{}
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
		Id:                r.ID,
		Name:              r.Name,
		CredentialKeys:    keys,
		CredentialPairs:   pairs,
		Metadata:          metadata,
		Revision:          r.Revision,
		Enabled:           r.Enabled,
		Documentation:     optString(r.Documentation),
		ModifiedDate:      FormatTime(r.ModifiedDate),
		ModifiedBy:        r.ModifiedBy,
		Permissions:       v.Permissions,
		Tags:              tags,
		LastDecryptedDate: optTime(r.LastDecryptedDate),
		LastRotationDate:  optTime(r.LastRotationDate),
		NextRotationDate:  optTime(v.NextRotation),
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

// serviceToPB renders a service. Single-service responses (expanded) carry the mapped credentials and
// blind credential ids; list and history responses carry empty lists, as Confidant's do.
func serviceToPB(v *ServiceView, history, expanded bool) *secretsv1.Service {
	r := v.Record
	id := r.ID
	if history {
		id = historyID(r.ID, r.Revision)
	}
	creds := []*secretsv1.Credential{}
	blind := []*secretsv1.BlindCredential{}
	if expanded {
		creds = credentialsToPB(v.Credentials, false)
		for _, b := range r.BlindCredentials {
			blind = append(blind, &secretsv1.BlindCredential{
				Id: b, CredentialPairs: map[string]string{}, CredentialKeys: []string{}, DataKey: map[string]string{},
			})
		}
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
		BlindCredentials: blind,
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

func fieldDiffToPB(d *FieldDiff) *secretsv1.FieldChange {
	if d == nil {
		return nil
	}
	added, _ := structpb.NewValue(d.Added)
	removed, _ := structpb.NewValue(d.Removed)
	return &secretsv1.FieldChange{Added: added, Removed: removed}
}

func keysDiffToPB(d *KeysDiff) *secretsv1.ListChange {
	if d == nil {
		return nil
	}
	return &secretsv1.ListChange{Added: d.Added, Removed: d.Removed}
}

func credentialDiffToPB(d *CredentialDiff) *secretsv1.CredentialDiff {
	return &secretsv1.CredentialDiff{
		Name:             fieldDiffToPB(d.Name),
		CredentialPairs:  keysDiffToPB(d.Pairs),
		Metadata:         keysDiffToPB(d.Metadata),
		Enabled:          fieldDiffToPB(d.Enabled),
		Documentation:    fieldDiffToPB(d.Documentation),
		ModifiedBy:       fieldDiffToPB(d.ModifiedBy),
		ModifiedDate:     fieldDiffToPB(d.ModifiedDate),
		Tags:             keysDiffToPB(d.Tags),
		LastRotationDate: fieldDiffToPB(d.LastRotationDate),
	}
}

func serviceDiffToPB(d *ServiceDiff) *secretsv1.ServiceDiff {
	return &secretsv1.ServiceDiff{
		Enabled:          fieldDiffToPB(d.Enabled),
		Credentials:      keysDiffToPB(d.Credentials),
		BlindCredentials: keysDiffToPB(d.BlindCredentials),
		Account:          fieldDiffToPB(d.Account),
		ModifiedBy:       fieldDiffToPB(d.ModifiedBy),
		ModifiedDate:     fieldDiffToPB(d.ModifiedDate),
	}
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
				List:             c.CredentialsList && c.ServicesList,
				Create:           c.CredentialsCreate && c.ServicesCreate,
				Credentials:      &secretsv1.ResourcePermissions{List: c.CredentialsList, Create: c.CredentialsCreate},
				Services:         &secretsv1.ResourcePermissions{List: c.ServicesList, Create: c.ServicesCreate},
				BlindCredentials: &secretsv1.ResourcePermissions{List: true, Create: true},
			},
		},
	}
}
