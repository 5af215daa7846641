// Package chat is gantry's Slack bot gateway, compatible with Lyft Omnibot's API: team, user, channel
// and IM lookups, direct messages and arbitrary Slack Web API actions as a configured bot.
//
// Layering: server.go is the gRPC transport (access control first, then validate, convert, call the
// domain, toStatus, convert back); service.go holds the domain rules; acl.go is Omnibot's
// access-control checks; slack.go the outbound Slack client (slack-go for typed calls, a small form
// POST for the raw pass-through) with its retry rules; cache.go the per-team cache; parse.go
// omnibot_parse; tokens.go the bot credentials (environment or the secrets service) and the one
// authenticated connection to the secrets service, which the approval relay (subpackage approvals:
// change requests posted to Slack, their buttons relayed back) goes on using; config.go reads
// Omnibot's configuration file shape; errors.go maps domain errors to gRPC status codes. The
// slacktest subpackage is the fake Slack the tests run against.
package chat
