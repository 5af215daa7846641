package secrets

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// Placeholders until the change request handlers land.

func (s *Server) ListChangeRequests(context.Context, *secretsv1.ListChangeRequestsRequest) (*secretsv1.ListChangeRequestsResponse, error) {
	return nil, status.Error(codes.Unimplemented, "not yet")
}
func (s *Server) GetChangeRequest(context.Context, *secretsv1.GetChangeRequestRequest) (*secretsv1.GetChangeRequestResponse, error) {
	return nil, status.Error(codes.Unimplemented, "not yet")
}
func (s *Server) ApproveChangeRequest(context.Context, *secretsv1.ApproveChangeRequestRequest) (*secretsv1.ApproveChangeRequestResponse, error) {
	return nil, status.Error(codes.Unimplemented, "not yet")
}
func (s *Server) RejectChangeRequest(context.Context, *secretsv1.RejectChangeRequestRequest) (*secretsv1.RejectChangeRequestResponse, error) {
	return nil, status.Error(codes.Unimplemented, "not yet")
}
func (s *Server) CancelChangeRequest(context.Context, *secretsv1.CancelChangeRequestRequest) (*secretsv1.CancelChangeRequestResponse, error) {
	return nil, status.Error(codes.Unimplemented, "not yet")
}
func (s *Server) ListDueCredentials(context.Context, *secretsv1.ListDueCredentialsRequest) (*secretsv1.ListDueCredentialsResponse, error) {
	return nil, status.Error(codes.Unimplemented, "not yet")
}
func (s *Server) ListChangeNotices(context.Context, *secretsv1.ListChangeNoticesRequest) (*secretsv1.ListChangeNoticesResponse, error) {
	return nil, status.Error(codes.Unimplemented, "not yet")
}
func (s *Server) RecordChangeNotice(context.Context, *secretsv1.RecordChangeNoticeRequest) (*secretsv1.RecordChangeNoticeResponse, error) {
	return nil, status.Error(codes.Unimplemented, "not yet")
}
func (s *Server) DecideChangeFromSlack(context.Context, *secretsv1.DecideChangeFromSlackRequest) (*secretsv1.DecideChangeFromSlackResponse, error) {
	return nil, status.Error(codes.Unimplemented, "not yet")
}
func (s *Server) ListRotationReminders(context.Context, *secretsv1.ListRotationRemindersRequest) (*secretsv1.ListRotationRemindersResponse, error) {
	return nil, status.Error(codes.Unimplemented, "not yet")
}
func (s *Server) ClaimRotationReminder(context.Context, *secretsv1.ClaimRotationReminderRequest) (*secretsv1.ClaimRotationReminderResponse, error) {
	return nil, status.Error(codes.Unimplemented, "not yet")
}
