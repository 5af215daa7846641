package gateway

import (
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/status"

	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
)

// maxSlackBody bounds a Slack request body. Slack's payloads are a few kilobytes; its largest
// (interactive components with a whole view state) stay far below this.
const maxSlackBody = 1 << 20

// slackReceivers are the paths Slack sends requests to: Omnibot's and gantry's spelling of each.
var slackReceivers = map[string]chatv1.SlackRequestKind{
	"/api/v1/slack/event":         chatv1.SlackRequestKind_SLACK_REQUEST_KIND_EVENT,
	"/api/v1/chat/event":          chatv1.SlackRequestKind_SLACK_REQUEST_KIND_EVENT,
	"/api/v1/slack/slash_command": chatv1.SlackRequestKind_SLACK_REQUEST_KIND_SLASH_COMMAND,
	"/api/v1/chat/slash_command":  chatv1.SlackRequestKind_SLACK_REQUEST_KIND_SLASH_COMMAND,
	"/api/v1/slack/interactive":   chatv1.SlackRequestKind_SLACK_REQUEST_KIND_INTERACTIVE,
	"/api/v1/chat/interactive":    chatv1.SlackRequestKind_SLACK_REQUEST_KIND_INTERACTIVE,
}

// registerSlackReceivers mounts the receivers beside the generated routes. They are not generated
// from the proto because Slack's signature covers the exact body bytes, which grpc-gateway's
// decoding (a form becomes fields) would not keep: the handler passes the body through unchanged
// with the three Slack headers, and the chat service verifies and answers. No header is trusted
// here: the signature is checked by the service, and the retry headers only feed stats.
func registerSlackReceivers(mux *runtime.ServeMux, chat chatv1.ChatServiceClient) error {
	for path, kind := range slackReceivers {
		if err := mux.HandlePath(http.MethodPost, path, slackReceiver(chat, kind)); err != nil {
			return err
		}
	}
	return nil
}

func slackFailure(w http.ResponseWriter, code int, msg string) {
	writeJSONError(w, code, msg, map[string]any{"status": "failure"})
}

func slackReceiver(chat chatv1.ChatServiceClient, kind chatv1.SlackRequestKind) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, _ map[string]string) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSlackBody))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				slackFailure(w, http.StatusRequestEntityTooLarge, "request body too large")
				return
			}
			slackFailure(w, http.StatusBadRequest, "could not read the request body")
			return
		}
		retry, _ := strconv.Atoi(r.Header.Get("X-Slack-Retry-Num"))
		res, err := chat.ReceiveSlackRequest(r.Context(), &chatv1.ReceiveSlackRequestRequest{
			Kind: kind, Body: body, ContentType: r.Header.Get("Content-Type"),
			Signature: r.Header.Get("X-Slack-Signature"), Timestamp: r.Header.Get("X-Slack-Request-Timestamp"),
			RetryNum: int32(min(max(retry, 0), 100)), RetryReason: r.Header.Get("X-Slack-Retry-Reason"),
		})
		if err != nil {
			st := status.Convert(err)
			slackFailure(w, runtime.HTTPStatusFromCode(st.Code()), st.Message())
			return
		}
		if res.GetContentType() != "" {
			w.Header().Set("Content-Type", res.GetContentType())
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		code := int(res.GetStatus())
		if code < 200 || code > 599 {
			code = http.StatusOK
		}
		w.WriteHeader(code)
		_, _ = w.Write(res.GetBody())
	}
}
