// Package approvals is the chat service's side of two-person approval of secret changes: the relay
// between the secrets service, which holds change requests, and Slack, where approvers see and decide
// them.
//
// The relay polls the secrets service (every -chat-approvals-poll-interval) for the change requests
// whose Slack message is missing or shows an older status, posts or updates each message as the
// configured team and bot, and records the message back; it also posts the rotation reminders it
// claims, once a day per credential. A press of a message's Approve or Reject button reaches it from
// the inbound receivers (events.Approvals), already verified as Slack's, and is relayed to the
// secrets service, which decides who the presser is and whether they may decide.
//
// Layering: render.go turns a change request or a due credential into a Slack message, from the
// names the secrets service gives (never a secret value: a change request carries none); relay.go is
// the loop; decide.go the presses. The package knows neither gRPC nor Slack's HTTP: the secrets
// service is reached through Secrets (chat adapts its gRPC client), Slack through Slack (chat's
// client, tokens and retries).
package approvals
