// Package chat is gantry's Slack bot gateway, compatible with Lyft Omnibot's API: team, user, channel
// and IM lookups, direct messages and arbitrary Slack Web API actions as a configured bot.
//
// Layering: server.go is the gRPC transport; service.go holds the domain rules; config.go reads
// Omnibot's configuration file shape; errors.go maps domain errors to gRPC status codes.
package chat
