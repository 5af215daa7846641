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
	// put is the cache's put count when a single lookup stored the entry (0 for a full listing's):
	// a listing that began before it is older than the entry, and keeps it (see listing).
	put uint64
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
	// puts counts the entries stored by single lookups (putUser, putChannel, putIM).
	puts uint64
}

// listing marks the start of a full listing: pass it to setUsers, setChannels or setIMs with the
// list. A lookup that stores an entry while the listing is on its way (send_im opening an IM,
// get_user reading a new member) knows more than the listing, which Slack answered earlier: the set
// keeps that entry instead of replacing it with the listing's older view, or dropping it.
type listing uint64

func (c *teamCache) beginListing() listing {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return listing(c.puts)
}

// putSince reports whether a single lookup stored e after the listing began. c.mu is held.
func (e entry[T]) putSince(l listing) bool { return e.put > uint64(l) }

// nextPut numbers a single lookup's entry. c.mu is held for writing.
func (c *teamCache) nextPut() uint64 {
	c.puts++
	return c.puts
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

// setUsers replaces the user list with a full listing begun at l; users that are not listable are
// left out, and users looked up since l are kept as looked up.
func (c *teamCache) setUsers(l listing, list []slack.User, now time.Time) {
	users := make(map[string]entry[User], len(list))
	for i := range list {
		if u := userFromSlack(&list[i]); u.listable() {
			users[u.ID] = entry[User]{val: u, at: now}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, e := range c.users {
		if e.putSince(l) {
			users[id] = e
		}
	}
	byEmail := make(map[string]string, len(users))
	byName := make(map[string]string, 2*len(users))
	for _, id := range sortedKeys(users) {
		u := users[id].val
		byEmail[normalEmail(u.Email)] = u.ID
		// omnibot_parse finds a user by display name (Omnibot's key) or by user name.
		byName[u.Handle] = u.ID
		byName[u.Name] = u.ID
	}
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
	c.users[u.ID] = entry[User]{val: u, at: now, put: c.nextPut()}
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

// setChannels replaces the conversation list with a full listing begun at l (IMs are kept per bot);
// conversations looked up since l are kept as looked up.
func (c *teamCache) setChannels(l listing, list []Conversation, now time.Time) {
	channels := make(map[string]entry[Conversation], len(list))
	for _, ch := range list {
		if !ch.IsIM {
			channels[ch.ID] = entry[Conversation]{val: ch, at: now}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, e := range c.channels {
		if e.putSince(l) {
			channels[id] = e
		}
	}
	names := make(map[string]string, len(channels))
	for _, id := range sortedKeys(channels) {
		names[channels[id].val.Name] = id
	}
	c.channels, c.chanName, c.chansAt = channels, names, now
}

func (c *teamCache) putChannel(ch Conversation, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.channels[ch.ID]; ok && c.chanName[old.val.Name] == ch.ID {
		delete(c.chanName, old.val.Name)
	}
	c.channels[ch.ID] = entry[Conversation]{val: ch, at: now, put: c.nextPut()}
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

// setIMs replaces a bot's IM list with a full listing begun at l; IMs opened or looked up since l
// are kept as they were stored.
func (c *teamCache) setIMs(l listing, bot string, list []Conversation, now time.Time) {
	ims := map[string]entry[Conversation]{}
	for _, ch := range list {
		if ch.IsIM {
			ims[ch.User] = entry[Conversation]{val: ch, at: now}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for user, e := range c.ims[bot] {
		if e.putSince(l) {
			ims[user] = e
		}
	}
	ids := make(map[string]string, len(ims))
	for user, e := range ims {
		ids[e.val.ID] = user
	}
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
	c.ims[bot][im.User] = entry[Conversation]{val: im, at: now, put: c.nextPut()}
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
