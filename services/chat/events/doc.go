// Package events is the chat service's inbound direction, Omnibot's receivers and webhook worker:
// Slack's Events API, slash commands and interactive components arrive (through the gateway, raw),
// are verified by their signature, answered within Slack's 3 seconds and stored in a durable queue
// (package queue); dispatchers take them from the queue, match them against the handlers of
// Omnibot's configuration (handlers.message_handlers, slash_command_handlers,
// interactive_component_handlers), POST the enriched payload to the handler's backend and carry out
// the actions and responses it answers with.
//
// Layering: receiver.go checks and stores a request (verify.go is the signature; approval.go decides
// the presses of change request buttons in-process, through the Approvals interface); dispatch.go runs
// the workers and the callbacks; message.go builds Omnibot's enriched payload; handlers.go is the
// configuration shape; config.go the settings. The package knows neither gRPC nor bbolt: Slack is
// reached through the Slack interface (chat's client, tokens and retries), storage through
// queue.Queue.
package events
