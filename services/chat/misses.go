package chat

import (
	"sync"
	"time"
)

// maxMisses bounds the "not found" answers remembered per team: a flood of random emails or ids
// evicts the oldest instead of growing memory (each entry is a key and a time, so about 1 MB).
const maxMisses = 10000

// missSet remembers Slack's recent "not found" answers for a short TTL, oldest first out. Keys are
// built by emailMiss and conversationMiss.
type missSet struct {
	mu    sync.Mutex
	ttl   time.Duration // 0: nothing is remembered
	at    map[string]time.Time
	order []missEntry // insertion order, which is expiry order: the TTL is the same for all
}

type missEntry struct {
	key string
	at  time.Time
}

func newMissSet(ttl time.Duration) *missSet {
	return &missSet{ttl: ttl, at: map[string]time.Time{}}
}

func emailMiss(email string) string          { return "email\x00" + normalEmail(email) }
func conversationMiss(bot, id string) string { return "conversation\x00" + bot + "\x00" + id }

// add remembers a miss.
func (m *missSet) add(key string, now time.Time) {
	if m.ttl <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire(now)
	for len(m.order) >= maxMisses {
		m.pop()
	}
	m.at[key] = now
	m.order = append(m.order, missEntry{key, now})
}

// has reports whether key was missed within the TTL.
func (m *missSet) has(key string, now time.Time) bool {
	if m.ttl <= 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	at, ok := m.at[key]
	return ok && now.Sub(at) < m.ttl
}

func (m *missSet) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.at)
}

// expire drops the entries older than the TTL. m.mu is held.
func (m *missSet) expire(now time.Time) {
	for len(m.order) > 0 && now.Sub(m.order[0].at) >= m.ttl {
		m.pop()
	}
}

// pop drops the oldest entry; the map keeps a key added again later. m.mu is held.
func (m *missSet) pop() {
	e := m.order[0]
	m.order[0] = missEntry{}
	m.order = m.order[1:]
	if m.at[e.key].Equal(e.at) {
		delete(m.at, e.key)
	}
	if len(m.order) == 0 {
		m.order = nil // let the backing array go
	}
}
