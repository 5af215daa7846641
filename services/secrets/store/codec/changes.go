package codec

import (
	"errors"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	storev1 "github.com/gantry-dev/gantry/proto/secretsstore/v1"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// Change requests (store.ChangeRequestRecord) go through the generated messages, as the grants
// records do: a request is read a handful of times in its life, never on the path of a secret read,
// so it does not earn hand-written wire code.
//
// They exist only in FormatProto. The kind is newer than the JSON format of schema version 2: no
// build that reads only JSON knows change requests, so none could need them in JSON, and a Writer
// of FormatJSON (an etcd prefix still at schema version 2) stores them in protobuf all the same.
// For the same reason they need no Kind: the upgrade pass (Upgrade, gantry check -upgrade) has no
// older form of them to rewrite.

// EncodeChangeRequest is the stored form of a change request, always FormatProto whatever format
// the store otherwise writes (see above). It fails for a string that is not UTF-8, which protobuf
// cannot hold: nothing is written rather than a record no decoder reads.
func EncodeChangeRequest(rec *store.ChangeRequestRecord) ([]byte, error) {
	if rec == nil {
		return nil, errors.New("secrets: store: nil change request")
	}
	if err := checkChangeUTF8(rec); err != nil {
		return nil, err
	}
	m := &storev1.ChangeRequestRecord{
		Id:              rec.ID,
		Version:         rec.Version,
		Action:          rec.Action,
		ResourceType:    rec.ResourceType,
		ResourceId:      rec.ResourceID,
		ResourceName:    rec.ResourceName,
		BaseRevision:    rec.BaseRevision,
		Status:          rec.Status,
		RequestedBy:     rec.RequestedBy,
		Reason:          rec.Reason,
		Created:         ts(rec.Created),
		Expires:         ts(rec.Expires),
		Required:        rec.Required,
		DecidedBy:       rec.DecidedBy,
		DecidedAt:       tsPtr(rec.DecidedAt),
		DecisionReason:  rec.DecisionReason,
		AppliedRevision: rec.AppliedRevision,
		Change:          rec.Change,
		Summary:         rec.Summary,
		SealedPairs:     rec.SealedPairs,
		WrappedKey:      rec.WrappedKey,
		Team:            rec.Team,
		Bot:             rec.Bot,
		Channel:         rec.Channel,
		NoticeChannel:   rec.NoticeChannel,
		NoticeTs:        rec.NoticeTS,
		NoticedStatus:   rec.NoticedStatus,
	}
	if len(rec.Approvals) > 0 {
		m.Approvals = make([]*storev1.ChangeApproval, len(rec.Approvals))
		for i, a := range rec.Approvals {
			m.Approvals[i] = &storev1.ChangeApproval{By: a.By, At: ts(a.At), Via: a.Via}
		}
	}
	return encode(m)
}

// DecodeChangeRequest decodes a stored change request into fresh memory (no byte of raw is kept, so
// the result outlives the transaction); area names where it was read in the error. As for the other
// records, empty collections come back nil, absent times zero, and times in UTC; DecidedAt is nil
// when it was nil, and set (even to the zero time) when it was set.
func DecodeChangeRequest(area, raw []byte) (*store.ChangeRequestRecord, error) {
	f, err := FormatOf(area, raw)
	if err != nil {
		return nil, err
	}
	if f != FormatProto {
		return nil, corrupt(area, errors.New("a change request in the JSON format, which no gantry writes"))
	}
	var m storev1.ChangeRequestRecord
	if err := unmarshal.Unmarshal(raw[1:], &m); err != nil {
		return nil, corrupt(area, err)
	}
	rec := &store.ChangeRequestRecord{
		ID:              m.Id,
		Version:         m.Version,
		Action:          m.Action,
		ResourceType:    m.ResourceType,
		ResourceID:      m.ResourceId,
		ResourceName:    m.ResourceName,
		BaseRevision:    m.BaseRevision,
		Status:          m.Status,
		RequestedBy:     m.RequestedBy,
		Reason:          m.Reason,
		Created:         fromTS(m.Created),
		Expires:         fromTS(m.Expires),
		Required:        m.Required,
		DecidedBy:       m.DecidedBy,
		DecisionReason:  m.DecisionReason,
		AppliedRevision: m.AppliedRevision,
		// The generated code copies bytes fields out of raw; an empty one is nil, as it was written.
		Change:        nilIfEmpty(m.Change),
		Summary:       nilIfEmpty(m.Summary),
		SealedPairs:   nilIfEmpty(m.SealedPairs),
		WrappedKey:    nilIfEmpty(m.WrappedKey),
		Team:          m.Team,
		Bot:           m.Bot,
		Channel:       m.Channel,
		NoticeChannel: m.NoticeChannel,
		NoticeTS:      m.NoticeTs,
		NoticedStatus: m.NoticedStatus,
	}
	rec.DecidedAt = fromTSPtr(m.DecidedAt)
	if len(m.Approvals) > 0 {
		rec.Approvals = make([]store.ChangeApproval, len(m.Approvals))
		for i, a := range m.Approvals {
			rec.Approvals[i] = store.ChangeApproval{By: a.By, At: fromTS(a.At), Via: a.Via}
		}
	}
	return rec, nil
}

// tsPtr is the timestamp of an optional time: absent when nil, present when set, even to the zero
// time (ts would leave that out), so nil and set stay apart as for the credentials' pointer times.
func tsPtr(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return &timestamppb.Timestamp{Seconds: t.Unix(), Nanos: int32(t.Nanosecond())}
}

// fromTSPtr is the optional time of a timestamp: nil when absent (see tsPtr).
func fromTSPtr(p *timestamppb.Timestamp) *time.Time {
	if p == nil {
		return nil
	}
	t := fromTS(p)
	return &t
}

// nilIfEmpty gives an empty collection back as nil, as the JSON format's omitempty did.
func nilIfEmpty[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	return s
}

func checkChangeUTF8(rec *store.ChangeRequestRecord) error {
	for _, f := range []struct{ name, value string }{
		{"id", rec.ID}, {"action", rec.Action}, {"resource_type", rec.ResourceType}, {"resource_id", rec.ResourceID},
		{"resource_name", rec.ResourceName}, {"status", rec.Status}, {"requested_by", rec.RequestedBy},
		{"reason", rec.Reason}, {"decided_by", rec.DecidedBy}, {"decision_reason", rec.DecisionReason},
		{"team", rec.Team}, {"bot", rec.Bot}, {"channel", rec.Channel}, {"notice_channel", rec.NoticeChannel},
		{"notice_ts", rec.NoticeTS}, {"noticed_status", rec.NoticedStatus},
	} {
		if !utf8.ValidString(f.value) {
			return errNotUTF8("change request", f.name)
		}
	}
	for _, a := range rec.Approvals {
		if !utf8.ValidString(a.By) || !utf8.ValidString(a.Via) {
			return errNotUTF8("change request", "approvals")
		}
	}
	return nil
}
