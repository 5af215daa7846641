package chat

import (
	"testing"
	"time"

	"github.com/slack-go/slack"
)

// TestListingKeepsWhatALookupStoredMeanwhile: a full listing that Slack answered before a lookup
// stored an entry (send_im opened an IM, get_user read a new member, a channel was looked up) does
// not replace or drop that entry when it lands after it; a listing begun after the lookup does.
// TestDemoWorkspace failed on a loaded machine this way: the background refresh listed the bot's IMs,
// send_im opened carol's, and the refresh's older list then replaced it.
func TestListingKeepsWhatALookupStoredMeanwhile(t *testing.T) {
	c := newTeamCache(time.Minute)
	now := time.Now()
	im := func(id, user string) Conversation {
		var c Conversation
		c.ID, c.IsIM, c.User, c.Created = id, true, user, 1
		return c
	}
	channel := func(id, name string) Conversation {
		var c Conversation
		c.ID, c.Name = id, name
		return c
	}
	alice, carol := im("D0ALICE01", "U0ALICE01"), im("D0CAROL01", "U0CAROL01")
	general, ops := channel("C0GENERAL", "general"), channel("C0OPS0001", "ops")
	slackUser := func(id, name string) slack.User {
		u := slack.User{ID: id, Name: name}
		u.Profile.Email = name + "@example.com"
		return u
	}

	// Each listing begins, a lookup stores a newer entry, then the listing (without it) lands.
	l := c.beginListing()
	c.putIM("pingbot", carol, now)
	c.setIMs(l, "pingbot", []Conversation{alice}, now)
	if ims, _ := c.imsOf("pingbot", now, time.Hour); len(ims) != 2 {
		t.Errorf("IMs after the listing: %+v, want alice's and the one opened during it", ims)
	}
	if got, _, _ := c.channelByID("pingbot", carol.ID, now, time.Hour); got.ID != carol.ID {
		t.Errorf("the opened IM is not found by its id: %+v", got)
	}

	l = c.beginListing()
	c.putChannel(ops, now)
	c.setChannels(l, []Conversation{general}, now)
	if _, ok, _ := c.channelByName("ops", now, time.Hour); !ok {
		t.Error("a channel looked up during the listing was dropped")
	}

	l = c.beginListing()
	c.putUser(User{ID: "U0DAVE001", Name: "dave", Handle: "dave", Email: "dave@example.com"}, now)
	c.setUsers(l, []slack.User{slackUser("U0ALICE01", "alice")}, now)
	if _, ok, _ := c.userByEmail("dave@example.com", now, time.Hour); !ok {
		t.Error("a user looked up during the listing was dropped")
	}
	if _, ok := c.userByName("dave"); !ok {
		t.Error("a user looked up during the listing lost its name")
	}

	// A listing begun after the lookups is newer than them: what it lacks is gone.
	c.setIMs(c.beginListing(), "pingbot", []Conversation{alice}, now)
	c.setChannels(c.beginListing(), []Conversation{general}, now)
	c.setUsers(c.beginListing(), []slack.User{slackUser("U0ALICE01", "alice")}, now)
	if ims, _ := c.imsOf("pingbot", now, time.Hour); len(ims) != 1 || ims[0].ID != alice.ID {
		t.Errorf("IMs after a later listing: %+v, want alice's alone", ims)
	}
	if _, ok, _ := c.channelByID("pingbot", carol.ID, now, time.Hour); ok {
		t.Error("the IM id index still holds an IM the later listing dropped")
	}
	if _, ok, _ := c.channelByName("ops", now, time.Hour); ok {
		t.Error("a later listing kept a channel it does not list")
	}
	if _, ok, _ := c.userByEmail("dave@example.com", now, time.Hour); ok {
		t.Error("a later listing kept a user it does not list")
	}
}
