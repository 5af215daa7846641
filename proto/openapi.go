// Package gantryproto holds gantry's API contract: the Protobuf definitions of the secrets, chat and
// proxyadmin services, their generated Go, gRPC and gateway code, and the generated OpenAPI documents,
// embedded here so the gateway can serve them.
package gantryproto

import "embed"

// OpenAPI holds the generated OpenAPI v2 documents, at <service>/v1/<service>.swagger.json.
//
//go:embed secrets/v1/secrets.swagger.json chat/v1/chat.swagger.json proxyadmin/v1/proxyadmin.swagger.json
var OpenAPI embed.FS
