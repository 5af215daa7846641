package kmsauth

import "testing"

// FuzzParseUsername: every username either fails with ErrInvalidUsername or parses into a value that
// prints back to a username parsing to the same value, with no control characters in it.
func FuzzParseUsername(f *testing.F) {
	for _, s := range []string{"api", "2/service/api", "2/user/alice", "3/user/bob", "1/service/x", "2//x", "2/user/", "a/b/c", "2/user/a/b", "\x00", "2/user/\x7f", "99999999999999999999/user/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseUsername(s)
		if err != nil {
			return
		}
		again, err := ParseUsername(u.String())
		if err != nil || again != u {
			t.Fatalf("%q parsed to %+v, whose String %q parses to %+v, %v", s, u, u.String(), again, err)
		}
		if !validName(u.From) || !validName(u.UserType) {
			t.Fatalf("%q parsed to invalid parts %+v", s, u)
		}
	})
}
