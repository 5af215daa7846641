package gateway

import (
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/gantry-dev/gantry/pkg/rpcpolicy"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
)

// Omnibot's action routes (action and send_im) answer a payload they cannot perform with
// {"ok": false, "error": ...}, as Slack's own 400 answers, which those routes pass through: callers
// read resp["ok"] on every 400. The chat service says so on its own refusals; the 400s the gateway
// gives before the service sees the call (a body that does not decode, kwargs that is not an object,
// an action that is not a string, a body of [], a path that is not UTF-8, too many query parameters,
// a body that cannot be read) say it too. So do the answers of a Slack that kept rate-limiting
// (429, whose body is Slack's own when the action reached it), was down or too slow (502, 504), and
// any other 5xx: every answer that is about the call rather than the caller's access or the route.
// 403, 404, 405 and 413 keep their bodies (Omnibot's 404s have no ok).

// notOKPrefixes are the path prefixes of every REST spelling of the action routes (their templates
// up to the first path parameter), and whether the route is send_im's, whose errors also name the
// team, bot and email asked for.
var notOKPrefixes = func() map[string]bool {
	table := rpcpolicy.MustFor(chatv1.File_chat_v1_chat_proto.Services().ByName("ChatService"))
	out := map[string]bool{}
	for _, method := range []string{chatv1.ChatService_PerformAction_FullMethodName, chatv1.ChatService_SendIm_FullMethodName} {
		for _, r := range table[method].Routes {
			prefix, _, _ := strings.Cut(r.Template, "{")
			out[prefix] = method == chatv1.ChatService_SendIm_FullMethodName
		}
	}
	return out
}()

// saysNotOK reports whether a 400 answer to r carries "ok": false (r is a POST to an action route),
// and for send_im the rest of its path (team/bot/email).
func saysNotOK(r *http.Request) (ok bool, sendIM string) {
	if r.Method != http.MethodPost {
		return false, ""
	}
	for p, isSendIM := range notOKPrefixes {
		if rest, found := strings.CutPrefix(r.URL.Path, p); found {
			if isSendIM {
				return true, rest
			}
			return true, ""
		}
	}
	return false, ""
}

// writeBadRequest answers 400 with message, and "ok": false on the action routes.
func writeBadRequest(w http.ResponseWriter, r *http.Request, message string) {
	writeJSONError(w, http.StatusBadRequest, message, notOKFields(r, http.StatusBadRequest, nil))
}

// saysNotOKWith reports the statuses of the action routes whose bodies say "ok": false.
func saysNotOKWith(code int) bool {
	return code == http.StatusBadRequest || code == http.StatusTooManyRequests || code >= 500
}

// notOKFields returns fields with "ok": false added when the answer to r is a 400, 429 or 5xx of an
// action route and the fields do not say ok already.
func notOKFields(r *http.Request, code int, fields map[string]any) map[string]any {
	notOK, sendIM := saysNotOK(r)
	if !saysNotOKWith(code) || !notOK {
		return fields
	}
	if _, ok := fields["ok"]; ok {
		return fields
	}
	out := make(map[string]any, len(fields)+4)
	// send_im's errors name what was asked for, as the service's own do (team/bot/email; an email
	// holds no slash, so a path of another shape names nothing).
	if parts := strings.Split(sendIM, "/"); len(parts) == 3 && utf8.ValidString(sendIM) {
		out["team_name"], out["bot_name"], out["email"] = parts[0], parts[1], parts[2]
	}
	for k, v := range fields {
		out[k] = v
	}
	out["ok"] = false
	return out
}
