// Package slacktest is a hand-written fake of the Slack Web API: an httptest server that answers the
// methods gantry's chat service calls with Slack's real JSON shapes, keeps posted messages, records
// every request it received, and injects failures on demand (ok:false errors, HTTP 429 with
// Retry-After, 5xx, slow answers), so the production client code (slack-go and the pass-through
// client) runs for real against it. Tests use it, and so does the demo workspace of -chat-demo
// (NewDemo, which internal/stack serves).
package slacktest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/wirekeys"
)

// User is a workspace member as users.list and users.lookupByEmail return it.
type User struct {
	ID          string
	Name        string
	DisplayName string
	Email       string
	Deleted     bool
	IsBot       bool
	// EmailConfirmed is users.info's is_email_confirmed: whether the user confirmed the address (an
	// unconfirmed one proves nothing about who they are). nil leaves the field out, as the users.info
	// answers of the recorded Omnibot payloads (internal/e2e/testdata/omnibot) have it.
	EmailConfirmed *bool
}

// Channel is a conversation as conversations.list and conversations.info return it. Kind is one of
// public_channel, private_channel, mpim or im; an im has User set and no Name.
type Channel struct {
	ID      string
	Name    string
	Kind    string
	User    string
	Created int64
	Members []string
	Topic   string
	Purpose string
}

// Fault is an injected failure of one method. Exactly one of Error, Status, Delay or Hold is normally set.
type Fault struct {
	// Token limits the fault to calls made with this token; empty matches every token.
	Token string
	// Error makes the method answer 200 {"ok": false, "error": Error}.
	Error string
	// Status makes the method answer this HTTP status (429 adds Retry-After and Slack's ratelimited
	// body; 5xx an HTML page, as Slack's edge sends).
	Status int
	// RetryAfter is the Retry-After value in seconds sent with a 429.
	RetryAfter int
	// Delay holds the answer this long before the normal (or faulty) response, or until the client
	// gives up.
	Delay time.Duration
	// Hold holds the answer until the channel is closed (or the client gives up), so a test decides
	// when a call in flight ends instead of guessing with a Delay.
	Hold <-chan struct{}
	// Times is how many calls the fault affects; 0 means every call.
	Times int
}

// Message is a message chat.postMessage accepted; conversations.history lists them, and chat.update
// changes them in place.
type Message struct {
	Channel string
	TS      string
	Text    string
	// Blocks is the message's blocks argument as sent (JSON), "" without blocks.
	Blocks string
	// Updates counts the chat.update calls that changed it.
	Updates int
}

// Request is one call the fake received.
type Request struct {
	Method      string // Slack method, e.g. chat.postMessage
	Token       string
	ContentType string
	Form        url.Values
	// At is when the fake received the call.
	At time.Time
}

// Server is the fake Slack Web API.
type Server struct {
	*httptest.Server
	// TeamID is reported in users and posted messages.
	TeamID string
	// BotID and BotName describe the poster of chat.postMessage answers.
	BotID, BotName string
	// OnPost, when set before the first call, is called (outside the fake's lock) with every message
	// chat.postMessage accepted.
	OnPost func(Message)
	// OnUpdate, when set before the first call, is called (outside the fake's lock) with every
	// message as chat.update left it.
	OnUpdate func(Message)
	// Retain, when set before the first call, bounds the recorded requests and each channel's
	// messages to the newest Retain (0 keeps all, as tests want): a demo workspace that runs for
	// days must not grow without end.
	Retain int

	mu       sync.Mutex
	users    map[string]*User
	channels map[string]*Channel
	faults   map[string][]*Fault
	requests []Request
	// messages are the posted messages per channel id, oldest first.
	messages map[string][]Message
	pageSize int
	nextIM   int
	nextTS   int
	// openByIDOnly: see SetOpenByIDOnly.
	openByIDOnly bool
}

// New starts a fake with an empty workspace. Close it when done (t.Cleanup(s.Close)).
func New() *Server {
	s := &Server{
		TeamID: "T0FAKE001", BotID: "B0FAKE001", BotName: "fakebot",
		users: map[string]*User{}, channels: map[string]*Channel{}, faults: map[string][]*Fault{},
		messages: map[string][]Message{}, pageSize: 1000,
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// APIURL is the base URL for slack.OptionAPIURL, with its trailing slash.
func (s *Server) APIURL() string { return s.URL + "/" }

// AddUser adds or replaces a user.
func (s *Server) AddUser(u User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cp := u
	s.users[u.ID] = &cp
}

// DeleteUser marks a user deleted, as deactivating an account in Slack does.
func (s *Server) DeleteUser(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u, ok := s.users[id]; ok {
		u.Deleted = true
	}
}

// AddChannel adds or replaces a conversation.
func (s *Server) AddChannel(c Channel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cp := c
	if cp.Created == 0 {
		cp.Created = 1500000000
	}
	s.channels[c.ID] = &cp
}

// SetOpenByIDOnly makes conversations.open describe an IM by its id alone even when asked for the
// whole IM (return_im), as Slack answers without return_im.
func (s *Server) SetOpenByIDOnly(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.openByIDOnly = on
}

// SetPageSize caps the page size of the list methods, to exercise paging.
func (s *Server) SetPageSize(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pageSize = n
}

// Inject adds a fault to method (e.g. "chat.postMessage"). Faults apply in the order added.
func (s *Server) Inject(method string, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cp := f
	s.faults[method] = append(s.faults[method], &cp)
}

// ClearFaults removes every injected fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = map[string][]*Fault{}
}

// Requests returns the calls received so far, optionally only those of one method.
func (s *Server) Requests(method string) []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Request
	for _, r := range s.requests {
		if method == "" || r.Method == method {
			out = append(out, r)
		}
	}
	return out
}

// Messages returns the messages posted to a channel so far, oldest first.
func (s *Server) Messages(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.messages[channel]...)
}

// Reset forgets the recorded requests.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = nil
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	method := strings.TrimPrefix(r.URL.Path, "/")
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	token := r.PostForm.Get("token")
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		token = strings.TrimPrefix(h, "Bearer ")
	}
	s.mu.Lock()
	s.requests = retainNewest(append(s.requests, Request{Method: method, Token: token, ContentType: r.Header.Get("Content-Type"), Form: r.PostForm, At: time.Now()}), s.Retain)
	fault := s.takeFault(method, token)
	s.mu.Unlock()

	if fault != nil && fault.Hold != nil {
		select {
		case <-fault.Hold:
		case <-r.Context().Done():
			return
		}
	}
	if fault != nil && fault.Delay > 0 {
		select {
		case <-time.After(fault.Delay):
		case <-r.Context().Done():
			return
		}
	}
	switch {
	case fault != nil && fault.Status == http.StatusTooManyRequests:
		w.Header().Set(wirekeys.RetryAfter, strconv.Itoa(fault.RetryAfter))
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"ok": false, "error": "ratelimited"})
		return
	case fault != nil && fault.Status != 0:
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(fault.Status)
		_, _ = fmt.Fprintf(w, "<html><body>%d %s</body></html>", fault.Status, http.StatusText(fault.Status))
		return
	case fault != nil && fault.Error != "":
		writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": fault.Error})
		return
	}
	if token == "" {
		writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": "not_authed"})
		return
	}
	s.mu.Lock()
	code, body, changed := s.answer(method, r.PostForm, token)
	s.mu.Unlock()
	switch {
	case changed == nil:
	case method == "chat.postMessage" && s.OnPost != nil:
		s.OnPost(*changed)
	case method == "chat.update" && s.OnUpdate != nil:
		s.OnUpdate(*changed)
	}
	writeJSON(w, code, body)
}

// takeFault returns the first fault matching the call, using up one of its Times. s.mu is held.
func (s *Server) takeFault(method, token string) *Fault {
	for i, f := range s.faults[method] {
		if f.Token != "" && f.Token != token {
			continue
		}
		cp := *f
		if f.Times > 0 {
			f.Times--
			if f.Times == 0 {
				s.faults[method] = append(s.faults[method][:i:i], s.faults[method][i+1:]...)
			}
		}
		return &cp
	}
	return nil
}

// retainNewest drops the oldest entries beyond limit (0: no limit), moving the rest to the front
// once the slice is twice the limit so that trimming costs O(1) per append on average.
func retainNewest[T any](list []T, limit int) []T {
	if limit <= 0 || len(list) < 2*limit {
		return list
	}
	n := copy(list, list[len(list)-limit:])
	clear(list[n:])
	return list[:n]
}

// writeJSON writes body as Slack does: "ok" is the first key of every Web API answer (clients, and
// chat's stats, read it there), the others follow sorted as encoding/json orders a map.
func writeJSON(w http.ResponseWriter, code int, body map[string]any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	ok, hasOK := body["ok"]
	if !hasOK {
		_ = json.NewEncoder(w).Encode(body)
		return
	}
	rest := make(map[string]any, len(body))
	for k, v := range body {
		if k != "ok" {
			rest[k] = v
		}
	}
	okJSON, _ := json.Marshal(ok)
	restJSON, _ := json.Marshal(rest)
	out := append([]byte(`{"ok":`), okJSON...)
	if len(restJSON) > 2 { // not {}
		out = append(append(out, ','), restJSON[1:]...)
	} else {
		out = append(out, '}')
	}
	_, _ = w.Write(append(out, '\n'))
}

// answer serves the workspace methods and returns the message chat.postMessage accepted or
// chat.update changed, if any. s.mu is held.
func (s *Server) answer(method string, form url.Values, token string) (int, map[string]any, *Message) {
	if method == "chat.update" {
		return s.update(form)
	}
	code, body := s.answerMethod(method, form)
	if method != "chat.postMessage" || code != 200 || body["ok"] != true {
		return code, body, nil
	}
	m := Message{Channel: body["channel"].(string), TS: body["ts"].(string), Text: form.Get("text"), Blocks: form.Get("blocks")}
	s.messages[m.Channel] = retainNewest(append(s.messages[m.Channel], m), s.Retain)
	return code, body, &m
}

// update is chat.update: the message of channel (an id, as Slack requires) and ts gets the new text
// and blocks. s.mu is held.
func (s *Server) update(form url.Values) (int, map[string]any, *Message) {
	ch, ts := form.Get("channel"), form.Get("ts")
	if _, ok := s.channels[ch]; !ok {
		return 200, map[string]any{"ok": false, "error": "channel_not_found"}, nil
	}
	msgs := s.messages[ch]
	i := slices.IndexFunc(msgs, func(m Message) bool { return m.TS == ts })
	if i < 0 {
		return 200, map[string]any{"ok": false, "error": "message_not_found"}, nil
	}
	msgs[i].Text, msgs[i].Blocks = form.Get("text"), form.Get("blocks")
	msgs[i].Updates++
	m := msgs[i]
	return 200, map[string]any{"ok": true, "channel": ch, "ts": ts, "text": m.Text, "message": map[string]any{
		"bot_id": s.BotID, "text": m.Text, "type": "message", "user": "U0BOT0001",
	}}, &m
}

// conversationNamed resolves chat.postMessage's channel argument as Slack does: a conversation id,
// or a channel name with or without its #. s.mu is held.
func (s *Server) conversationNamed(arg string) (*Channel, bool) {
	if c, ok := s.channels[arg]; ok {
		return c, true
	}
	name := strings.TrimPrefix(arg, "#")
	for _, c := range s.channels {
		if c.Name != "" && c.Name == name {
			return c, true
		}
	}
	return nil, false
}

// answerMethod computes the answer of one method. s.mu is held.
func (s *Server) answerMethod(method string, form url.Values) (int, map[string]any) {
	switch method {
	case "auth.test":
		return 200, map[string]any{"ok": true, "url": "https://fake.slack.com/", "team": "fake", "user": s.BotName, "team_id": s.TeamID, "user_id": "U0BOT0001", "bot_id": s.BotID}
	case "users.list":
		var all []*User
		for _, u := range s.users {
			all = append(all, u)
		}
		sort.Slice(all, func(i, j int) bool { return all[i].ID < all[j].ID })
		page, next := paginate(len(all), form, s.pageSize)
		members := []any{}
		for _, u := range all[page[0]:page[1]] {
			members = append(members, s.userJSON(u))
		}
		return 200, map[string]any{"ok": true, "members": members, "cache_ts": 1500000000, "response_metadata": map[string]any{"next_cursor": next}}
	case "users.lookupByEmail":
		email := form.Get("email")
		for _, u := range s.users {
			if u.Email != "" && strings.EqualFold(u.Email, email) {
				return 200, map[string]any{"ok": true, "user": s.userJSON(u)}
			}
		}
		return 200, map[string]any{"ok": false, "error": "users_not_found"}
	case "users.info":
		if u, ok := s.users[form.Get("user")]; ok {
			user := s.userJSON(u)
			if u.EmailConfirmed != nil {
				user["is_email_confirmed"] = *u.EmailConfirmed
			}
			return 200, map[string]any{"ok": true, "user": user}
		}
		return 200, map[string]any{"ok": false, "error": "user_not_found"}
	case "conversations.list":
		types := map[string]bool{}
		for _, t := range strings.Split(form.Get("types"), ",") {
			if t != "" {
				types[t] = true
			}
		}
		if len(types) == 0 {
			types["public_channel"] = true // Slack's default
		}
		var all []*Channel
		for _, c := range s.channels {
			if types[c.Kind] {
				all = append(all, c)
			}
		}
		sort.Slice(all, func(i, j int) bool { return all[i].ID < all[j].ID })
		page, next := paginate(len(all), form, s.pageSize)
		chans := []any{}
		for _, c := range all[page[0]:page[1]] {
			chans = append(chans, s.channelJSON(c))
		}
		return 200, map[string]any{"ok": true, "channels": chans, "response_metadata": map[string]any{"next_cursor": next}}
	case "conversations.info":
		if c, ok := s.channels[form.Get("channel")]; ok {
			return 200, map[string]any{"ok": true, "channel": s.channelJSON(c)}
		}
		return 200, map[string]any{"ok": false, "error": "channel_not_found"}
	case "conversations.open":
		uid := form.Get("users")
		u, ok := s.users[uid]
		if !ok {
			return 200, map[string]any{"ok": false, "error": "user_not_found"}
		}
		if u.Deleted {
			return 200, map[string]any{"ok": false, "error": "user_disabled"}
		}
		// Slack describes the IM whole only when asked to (return_im), else by its id alone.
		opened := func(c *Channel) map[string]any {
			if form.Get("return_im") == "true" && !s.openByIDOnly {
				return s.channelJSON(c)
			}
			return map[string]any{"id": c.ID}
		}
		for _, c := range s.channels {
			if c.Kind == "im" && c.User == uid {
				return 200, map[string]any{"ok": true, "no_op": true, "already_open": true, "channel": opened(c)}
			}
		}
		s.nextIM++
		c := &Channel{ID: fmt.Sprintf("D0OPEN%03d", s.nextIM), Kind: "im", User: uid, Created: 1600000000 + int64(s.nextIM)}
		s.channels[c.ID] = c
		return 200, map[string]any{"ok": true, "channel": opened(c)}
	case "chat.postMessage":
		c, ok := s.conversationNamed(form.Get("channel"))
		if !ok {
			return 200, map[string]any{"ok": false, "error": "channel_not_found"}
		}
		ch := c.ID
		s.nextTS++
		ts := fmt.Sprintf("1503435956.%06d", s.nextTS)
		return 200, map[string]any{"ok": true, "channel": ch, "ts": ts, "message": map[string]any{
			"bot_id": s.BotID, "subtype": "bot_message", "text": form.Get("text"), "ts": ts, "type": "message", "username": s.BotName,
		}}
	case "conversations.history":
		ch := form.Get("channel")
		if _, ok := s.channels[ch]; !ok {
			return 200, map[string]any{"ok": false, "error": "channel_not_found"}
		}
		posted := s.messages[ch]
		msgs := make([]any, 0, len(posted))
		for i := len(posted) - 1; i >= 0; i-- { // newest first, as Slack lists them
			m := posted[i]
			msgs = append(msgs, map[string]any{"type": "message", "subtype": "bot_message", "bot_id": s.BotID, "username": s.BotName, "text": m.Text, "ts": m.TS})
		}
		return 200, map[string]any{"ok": true, "messages": msgs, "has_more": false, "pin_count": 0}
	case "reactions.add":
		return 200, map[string]any{"ok": true}
	default:
		return 200, map[string]any{"ok": false, "error": "unknown_method", "req_method": method}
	}
}

// paginate returns the [from, to) window of a list of n items for the request's cursor and limit,
// and the next cursor ("" at the end). Cursors are decimal offsets, opaque to clients.
func paginate(n int, form url.Values, pageSize int) ([2]int, string) {
	from, _ := strconv.Atoi(form.Get("cursor"))
	limit, _ := strconv.Atoi(form.Get("limit"))
	if limit <= 0 || limit > pageSize {
		limit = pageSize
	}
	from = min(max(from, 0), n)
	to := min(from+limit, n)
	next := ""
	if to < n {
		next = strconv.Itoa(to)
	}
	return [2]int{from, to}, next
}

func (s *Server) userJSON(u *User) map[string]any {
	return map[string]any{
		"id": u.ID, "team_id": s.TeamID, "name": u.Name, "deleted": u.Deleted, "is_bot": u.IsBot,
		"real_name": u.Name, "tz": "America/Los_Angeles",
		"profile": map[string]any{"display_name": u.DisplayName, "real_name": u.Name, "email": u.Email},
	}
}

func (s *Server) channelJSON(c *Channel) map[string]any {
	if c.Kind == "im" {
		deleted := false
		if u, ok := s.users[c.User]; ok {
			deleted = u.Deleted
		}
		// context_team_id and updated are fields Slack gives that gantry's types leave out.
		return map[string]any{"id": c.ID, "created": c.Created, "is_im": true, "is_org_shared": false, "user": c.User, "is_user_deleted": deleted, "priority": 0.5,
			"context_team_id": s.TeamID, "updated": 1700000000000}
	}
	members := c.Members
	if members == nil {
		members = []string{}
	}
	return map[string]any{
		"id": c.ID, "name": c.Name, "is_channel": c.Kind == "public_channel", "is_group": c.Kind == "private_channel",
		"is_im": false, "is_mpim": c.Kind == "mpim", "is_private": c.Kind != "public_channel",
		"created": c.Created, "creator": "U0CREATOR", "is_archived": false, "is_general": c.Name == "general",
		"unlinked": 0, "name_normalized": c.Name, "is_shared": false, "is_org_shared": false, "is_member": true,
		"members": members, "num_members": len(members), "previous_names": []string{},
		"topic":   map[string]any{"value": c.Topic, "creator": "U0CREATOR", "last_set": 1500000000},
		"purpose": map[string]any{"value": c.Purpose, "creator": "U0CREATOR", "last_set": 1500000000},
	}
}
