package chat

import (
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"
)

// User is a workspace member as the chat service keeps it.
type User struct {
	ID     string
	TeamID string
	// Name is the display name, or the user name when no display name is set (Omnibot's rule).
	Name string
	// Handle is the user name (Slack's name field).
	Handle  string
	Email   string
	Deleted bool
	IsBot   bool
}

// slackbotID is Slackbot's user id. Slack does not flag Slackbot is_bot, so it is named here.
const slackbotID = "USLACKBOT"

// listable is the one rule for which Slack users the service knows: Omnibot's update_user leaves out
// bots, deleted users and users without an email (Slackbot has none, and is named anyway). Every path
// that adds a user to the cache goes through it (the refresh's setUsers and the read-through's
// putUser), so get_user, send_im and omnibot_parse see the same users whatever ran first.
func (u User) listable() bool {
	return !u.IsBot && !u.Deleted && u.ID != slackbotID && u.Email != ""
}

func userFromSlack(u *slack.User) User {
	name := u.Profile.DisplayName
	if name == "" {
		name = u.Name
	}
	return User{ID: u.ID, TeamID: u.TeamID, Name: name, Handle: u.Name, Email: u.Profile.Email, Deleted: u.Deleted, IsBot: u.IsBot}
}

type entry[T any] struct {
	val T
	at  time.Time
}

func (e entry[T]) fresh(now time.Time, ttl time.Duration) bool { return now.Sub(e.at) < ttl }

// teamCache holds what the service knows of one workspace: users, conversations (public, private,
// MPIM) and, per bot, its IMs. Each replica keeps its own; nothing is shared or persisted. Entries
// older than the TTL are looked up again; a full refresh replaces the lists, so users deleted (or
// conversations archived) since the last refresh disappear.
type teamCache struct {
	mu       sync.RWMutex
	users    map[string]entry[User] // by user id
	byEmail  map[string]string      // lower-case email -> user id
	byName   map[string]string      // display name or name -> user id
	channels map[string]entry[Conversation]
	chanName map[string]string                         // channel name -> id
	ims      map[string]map[string]entry[Conversation] // bot name -> user id -> IM
	imIDs    map[string]map[string]string              // bot name -> IM id -> user id
	imsAt    map[string]time.Time                      // bot name -> last full IM list
	usersAt  time.Time                                 // last full user list
	chansAt  time.Time                                 // last full conversation list
	// misses are Slack's recent "not found" answers (unknown emails and conversation ids).
	misses *missSet
}

func newTeamCache(negativeTTL time.Duration) *teamCache {
	return &teamCache{
		users: map[string]entry[User]{}, byEmail: map[string]string{}, byName: map[string]string{},
		channels: map[string]entry[Conversation]{}, chanName: map[string]string{},
		ims: map[string]map[string]entry[Conversation]{}, imIDs: map[string]map[string]string{}, imsAt: map[string]time.Time{},
		misses: newMissSet(negativeTTL),
	}
}

// normalEmail is the form emails are compared in: Slack matches them case-insensitively.
func normalEmail(email string) string { return strings.ToLower(email) }

// setUsers replaces the user list with a full listing; users that are not listable are left out.
func (c *teamCache) setUsers(list []slack.User, now time.Time) {
	users := make(map[string]entry[User], len(list))
	byEmail := map[string]string{}
	byName := map[string]string{}
	for i := range list {
		u := userFromSlack(&list[i])
		if !u.listable() {
			continue
		}
		users[u.ID] = entry[User]{u, now}
		byEmail[normalEmail(u.Email)] = u.ID
		// omnibot_parse finds a user by display name (Omnibot's key) or by user name.
		byName[u.Handle] = u.ID
		byName[u.Name] = u.ID
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.users, c.byEmail, c.byName, c.usersAt = users, byEmail, byName, now
}

// putUser stores one looked-up user and reports whether it is listable; one that is not (deleted
// since, a bot) is evicted instead, and the caller answers not found.
func (c *teamCache) putUser(u User, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.users[u.ID]; ok {
		delete(c.byEmail, normalEmail(old.val.Email))
		c.dropNames(old.val)
	}
	if !u.listable() {
		delete(c.users, u.ID)
		return false
	}
	c.users[u.ID] = entry[User]{u, now}
	c.byEmail[normalEmail(u.Email)] = u.ID
	c.byName[u.Handle] = u.ID
	c.byName[u.Name] = u.ID
	return true
}

// dropNames removes a user's name index entries. c.mu is held.
func (c *teamCache) dropNames(u User) {
	for _, n := range []string{u.Name, u.Handle} {
		if c.byName[n] == u.ID {
			delete(c.byName, n)
		}
	}
}

// evictEmail forgets the user with this email (Slack no longer knows it).
func (c *teamCache) evictEmail(email string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := normalEmail(email)
	if id, ok := c.byEmail[key]; ok {
		delete(c.byEmail, key)
		if u, ok := c.users[id]; ok {
			c.dropNames(u.val)
		}
		delete(c.users, id)
	}
}

// userByEmail returns the cached user and whether it is still fresh. Emails match case-insensitively.
func (c *teamCache) userByEmail(email string, now time.Time, ttl time.Duration) (User, bool, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.users[c.byEmail[normalEmail(email)]]
	return e.val, ok, ok && e.fresh(now, ttl)
}

// userByName serves omnibot_parse: a cached user by display name or name.
func (c *teamCache) userByName(name string) (User, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.users[c.byName[name]]
	return e.val, ok
}

// setChannels replaces the conversation list with a full listing (IMs are kept per bot).
func (c *teamCache) setChannels(list []Conversation, now time.Time) {
	channels := make(map[string]entry[Conversation], len(list))
	names := map[string]string{}
	for _, ch := range list {
		if ch.IsIM {
			continue
		}
		channels[ch.ID] = entry[Conversation]{ch, now}
		names[ch.Name] = ch.ID
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.channels, c.chanName, c.chansAt = channels, names, now
}

func (c *teamCache) putChannel(ch Conversation, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.channels[ch.ID]; ok && c.chanName[old.val.Name] == ch.ID {
		delete(c.chanName, old.val.Name)
	}
	c.channels[ch.ID] = entry[Conversation]{ch, now}
	c.chanName[ch.Name] = ch.ID
}

func (c *teamCache) evictChannel(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.channels[id]; ok {
		if c.chanName[old.val.Name] == id {
			delete(c.chanName, old.val.Name)
		}
		delete(c.channels, id)
	}
}

// channelByName returns a cached public or private channel or MPIM by name, and whether it is fresh.
func (c *teamCache) channelByName(name string, now time.Time, ttl time.Duration) (Conversation, bool, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.channels[c.chanName[name]]
	return e.val, ok, ok && e.fresh(now, ttl)
}

func (c *teamCache) channelsFresh(now time.Time, ttl time.Duration) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return !c.chansAt.IsZero() && now.Sub(c.chansAt) < ttl
}

// setIMs replaces a bot's IM list with a full listing.
func (c *teamCache) setIMs(bot string, list []Conversation, now time.Time) {
	ims := map[string]entry[Conversation]{}
	ids := map[string]string{}
	for _, ch := range list {
		if ch.IsIM {
			ims[ch.User] = entry[Conversation]{ch, now}
			ids[ch.ID] = ch.User
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ims[bot], c.imIDs[bot], c.imsAt[bot] = ims, ids, now
}

func (c *teamCache) putIM(bot string, im Conversation, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ims[bot] == nil {
		c.ims[bot] = map[string]entry[Conversation]{}
		c.imIDs[bot] = map[string]string{}
	}
	if old, ok := c.ims[bot][im.User]; ok {
		delete(c.imIDs[bot], old.val.ID)
	}
	c.ims[bot][im.User] = entry[Conversation]{im, now}
	c.imIDs[bot][im.ID] = im.User
}

// channelByID returns a cached conversation by id: a channel or MPIM of the team, or one of the
// bot's IMs. It reports whether it is fresh, like channelByName.
func (c *teamCache) channelByID(bot, id string, now time.Time, ttl time.Duration) (Conversation, bool, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if e, ok := c.channels[id]; ok {
		return e.val, true, e.fresh(now, ttl)
	}
	user, ok := c.imIDs[bot][id]
	if !ok {
		return Conversation{}, false, false
	}
	e, ok := c.ims[bot][user]
	return e.val, ok, ok && e.fresh(now, ttl)
}

// imOf returns a bot's cached IM with a user. An IM whose user was deleted is not usable.
func (c *teamCache) imOf(bot, userID string, now time.Time, ttl time.Duration) (Conversation, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.ims[bot][userID]
	return e.val, ok && !e.val.IsUserDeleted && e.fresh(now, ttl)
}

// imsOf returns every cached IM of a bot, and whether the list is fresh.
func (c *teamCache) imsOf(bot string, now time.Time, ttl time.Duration) ([]Conversation, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	m := c.ims[bot]
	out := make([]Conversation, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, m[k].val)
	}
	at, ok := c.imsAt[bot]
	return out, ok && now.Sub(at) < ttl
}
