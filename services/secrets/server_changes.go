package secrets

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gantry-dev/gantry/pkg/wirekeys"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// PollMethods are the RPCs chat's approval relay calls every -chat-approvals-poll-interval: their
// successful calls log at debug (grpcserver.Service.Polls).
var PollMethods = []string{secretsv1.SecretsService_ListChangeNotices_FullMethodName, secretsv1.SecretsService_ListRotationReminders_FullMethodName}

// changeStatusURL is where a change request is read.
func changeStatusURL(id string) string { return "/v1/changes/" + id }

// held answers a write an approval rule held: the change request for the answer, with the REST
// status 202 and a Location header set through response metadata. nil when err is anything else.
func (s *Server) held(ctx context.Context, err error) *secretsv1.ChangeRequest {
	var held *ChangeHeldError
	if !errors.As(err, &held) {
		return nil
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(wirekeys.HTTPCode, "202", wirekeys.Location, changeStatusURL(held.Request.Record.ID)))
	return changeToPB(held.Request)
}

func changeToPB(v *ChangeRequestView) *secretsv1.ChangeRequest {
	r := v.Record
	out := &secretsv1.ChangeRequest{
		Id: r.ID, Status: r.Status, StatusUrl: changeStatusURL(r.ID), Action: r.Action,
		ResourceType: r.ResourceType, ResourceId: r.ResourceID, ResourceName: r.ResourceName,
		BaseRevision: r.BaseRevision, RequestedBy: r.RequestedBy, Reason: r.Reason,
		CreatedDate: FormatTime(r.Created), ExpiryDate: FormatTime(r.Expires), ApprovalsRequired: r.Required,
		DecidedBy: r.DecidedBy, DecidedDate: optTime(r.DecidedAt), DecisionReason: r.DecisionReason, Channel: r.Channel,
	}
	for _, a := range r.Approvals {
		out.Approvals = append(out.Approvals, &secretsv1.ChangeApproval{By: a.By, Date: FormatTime(a.At), Via: a.Via})
	}
	if r.AppliedRevision != 0 {
		out.AppliedRevision = wrapperspb.Int32(r.AppliedRevision)
	}
	sum := v.Summary
	out.Changes = &secretsv1.ChangeSummary{
		KeysAdded: sum.KeysAdded, KeysRemoved: sum.KeysRemoved, KeysChanged: sum.KeysChanged, MetadataChanged: sum.MetadataChanged,
		CredentialsAdded: sum.CredentialsAdded, CredentialsRemoved: sum.CredentialsRemoved,
		BlindCredentialsAdded: sum.BlindCredentialsAdded, BlindCredentialsRemoved: sum.BlindCredentialsRemoved,
		Name: optString(sum.Name), FieldsChanged: sum.FieldsChanged,
	}
	if sum.Enabled != nil {
		out.Changes.Enabled = wrapperspb.Bool(*sum.Enabled)
	}
	if sum.ToRevision != nil {
		out.Changes.ToRevision = wrapperspb.Int32(*sum.ToRevision)
	}
	return out
}

func changesToPB(views []*ChangeRequestView) []*secretsv1.ChangeRequest {
	out := make([]*secretsv1.ChangeRequest, len(views))
	for i, v := range views {
		out[i] = changeToPB(v)
	}
	return out
}

// ListChangeRequests implements secretsv1.SecretsServiceServer.
func (s *Server) ListChangeRequests(ctx context.Context, req *secretsv1.ListChangeRequestsRequest) (*secretsv1.ListChangeRequestsResponse, error) {
	views, next, err := s.svc.ListChangeRequests(ctx, req.GetStatus(), optInt32(req.GetLimit()), req.GetNextPage())
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.ListChangeRequestsResponse{ChangeRequests: changesToPB(views), NextPage: nextPage(next)}, nil
}

// GetChangeRequest implements secretsv1.SecretsServiceServer.
func (s *Server) GetChangeRequest(ctx context.Context, req *secretsv1.GetChangeRequestRequest) (*secretsv1.GetChangeRequestResponse, error) {
	v, err := s.svc.GetChangeRequest(ctx, req.GetId())
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.GetChangeRequestResponse{ChangeRequest: changeToPB(v)}, nil
}

// ApproveChangeRequest implements secretsv1.SecretsServiceServer.
func (s *Server) ApproveChangeRequest(ctx context.Context, req *secretsv1.ApproveChangeRequestRequest) (*secretsv1.ApproveChangeRequestResponse, error) {
	v, err := s.svc.ApproveChangeRequest(ctx, req.GetId(), "api")
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.ApproveChangeRequestResponse{ChangeRequest: changeToPB(v)}, nil
}

// RejectChangeRequest implements secretsv1.SecretsServiceServer.
func (s *Server) RejectChangeRequest(ctx context.Context, req *secretsv1.RejectChangeRequestRequest) (*secretsv1.RejectChangeRequestResponse, error) {
	v, err := s.svc.RejectChangeRequest(ctx, req.GetId(), req.GetReason())
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.RejectChangeRequestResponse{ChangeRequest: changeToPB(v)}, nil
}

// CancelChangeRequest implements secretsv1.SecretsServiceServer.
func (s *Server) CancelChangeRequest(ctx context.Context, req *secretsv1.CancelChangeRequestRequest) (*secretsv1.CancelChangeRequestResponse, error) {
	v, err := s.svc.CancelChangeRequest(ctx, req.GetId(), req.GetReason())
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.CancelChangeRequestResponse{ChangeRequest: changeToPB(v)}, nil
}

func dueToPB(d DueCredential) *secretsv1.DueCredential {
	return &secretsv1.DueCredential{Id: d.ID, Name: d.Name, State: d.State, NextRotationDate: FormatTime(d.Next),
		LastRotationDate: optTime(d.LastRotation), Services: d.Services}
}

// ListDueCredentials implements secretsv1.SecretsServiceServer.
func (s *Server) ListDueCredentials(ctx context.Context, req *secretsv1.ListDueCredentialsRequest) (*secretsv1.ListDueCredentialsResponse, error) {
	due, err := s.svc.ListDueCredentials(ctx, optInt32(req.GetWithinDays()))
	if err != nil {
		return nil, s.fail(err)
	}
	out := &secretsv1.ListDueCredentialsResponse{}
	for _, d := range due {
		out.Credentials = append(out.Credentials, dueToPB(d))
	}
	return out, nil
}

// ListChangeNotices implements secretsv1.SecretsServiceServer.
func (s *Server) ListChangeNotices(ctx context.Context, _ *secretsv1.ListChangeNoticesRequest) (*secretsv1.ListChangeNoticesResponse, error) {
	views, err := s.svc.ListChangeNotices(ctx)
	if err != nil {
		return nil, s.fail(err)
	}
	out := &secretsv1.ListChangeNoticesResponse{}
	for _, v := range views {
		r := v.Record
		out.Notices = append(out.Notices, &secretsv1.ChangeNotice{ChangeRequest: changeToPB(v), Team: r.Team, Bot: r.Bot,
			Channel: r.Channel, NoticeChannel: r.NoticeChannel, NoticeTs: r.NoticeTS})
	}
	return out, nil
}

// RecordChangeNotice implements secretsv1.SecretsServiceServer.
func (s *Server) RecordChangeNotice(ctx context.Context, req *secretsv1.RecordChangeNoticeRequest) (*secretsv1.RecordChangeNoticeResponse, error) {
	if err := s.svc.RecordChangeNotice(ctx, req.GetId(), req.GetNoticeChannel(), req.GetNoticeTs(), req.GetStatus()); err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.RecordChangeNoticeResponse{}, nil
}

// DecideChangeFromSlack implements secretsv1.SecretsServiceServer.
func (s *Server) DecideChangeFromSlack(ctx context.Context, req *secretsv1.DecideChangeFromSlackRequest) (*secretsv1.DecideChangeFromSlackResponse, error) {
	v, principal, refused, err := s.svc.DecideChangeFromSlack(ctx, SlackPress{ID: req.GetId(), Decision: req.GetDecision(),
		TeamID: req.GetSlackTeamId(), UserID: req.GetSlackUserId(), ConfirmedEmail: req.GetSlackEmail()})
	if err != nil {
		return nil, s.fail(err)
	}
	out := &secretsv1.DecideChangeFromSlackResponse{Refused: refused, Principal: principal}
	if v != nil {
		out.ChangeRequest = changeToPB(v)
	}
	return out, nil
}

// ListRotationReminders implements secretsv1.SecretsServiceServer.
func (s *Server) ListRotationReminders(ctx context.Context, _ *secretsv1.ListRotationRemindersRequest) (*secretsv1.ListRotationRemindersResponse, error) {
	reminders, err := s.svc.ListRotationReminders(ctx)
	if err != nil {
		return nil, s.fail(err)
	}
	out := &secretsv1.ListRotationRemindersResponse{}
	for _, r := range reminders {
		out.Reminders = append(out.Reminders, &secretsv1.RotationReminder{Credential: dueToPB(r.Due), Key: r.Key, Team: r.Team, Bot: r.Bot, Channels: r.Channels})
	}
	return out, nil
}

// ClaimRotationReminder implements secretsv1.SecretsServiceServer.
func (s *Server) ClaimRotationReminder(ctx context.Context, req *secretsv1.ClaimRotationReminderRequest) (*secretsv1.ClaimRotationReminderResponse, error) {
	claimed, err := s.svc.ClaimRotationReminder(ctx, req.GetKey())
	if err != nil {
		return nil, s.fail(err)
	}
	return &secretsv1.ClaimRotationReminderResponse{Claimed: claimed}, nil
}
