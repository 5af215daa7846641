package jwtkeys_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/jwtkeys"
)

func TestOpenCreatesAndReloads(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	logger, logs := observedLogger()
	envs := []string{"staging", "production", "staging"} // the duplicate must not create two keys
	s, err := jwtkeys.Open(dir, envs, logger)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Environments(), []string{"production", "staging"}; !slices.Equal(got, want) {
		t.Errorf("Environments = %v, want %v", got, want)
	}
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o700 {
		t.Errorf("folder mode = %04o, want 0700", perm)
	}
	reopened, err := jwtkeys.Open(dir, []string{"production", "staging"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kidPattern := regexp.MustCompile(`^[0-9a-f]{16}$`)
	for _, env := range []string{"production", "staging"} {
		t.Run(env, func(t *testing.T) {
			path := filepath.Join(dir, env+".json")
			info, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if perm := info.Mode().Perm(); perm != 0o600 {
				t.Errorf("%s mode = %04o, want 0600", path, perm)
			}
			var kf struct {
				Active string `json:"active"`
				Keys   []struct {
					Kid        string `json:"kid"`
					PrivateKey string `json:"private_key"`
					Created    string `json:"created"`
				} `json:"keys"`
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &kf); err != nil {
				t.Fatal(err)
			}
			if len(kf.Keys) != 1 || kf.Keys[0].Kid != kf.Active {
				t.Fatalf("key file holds %+v, want one key that is the active one", kf)
			}
			if !strings.HasPrefix(kf.Keys[0].PrivateKey, "-----BEGIN PRIVATE KEY-----") {
				t.Errorf("private_key is not PKCS#8 PEM")
			}
			if _, err := time.Parse(time.RFC3339, kf.Keys[0].Created); err != nil {
				t.Errorf("created: %v", err)
			}

			active, all := publicKeys(t, s, env)
			if !kidPattern.MatchString(active.Kid) || active.Kid != kf.Active {
				t.Errorf("active kid = %q, want 16 hex characters equal to the file's %q", active.Kid, kf.Active)
			}
			if active.Kty != "RSA" || active.Alg != "RS256" || active.E != "AQAB" || len(active.N) != 342 {
				t.Errorf("active JWK = %+v, want a 2048-bit RSA RS256 key with e=AQAB", active)
			}
			if len(all) != 1 || all[0] != active {
				t.Errorf("all = %+v, want just the active key", all)
			}
			reActive, reAll := publicKeys(t, reopened, env)
			if reActive != active || !slices.Equal(reAll, all) {
				t.Errorf("reopened keys = %+v %+v, want %+v %+v", reActive, reAll, active, all)
			}
			// A token signed by the first store verifies with the reloaded keys: same private key.
			token, err := s.Sign(env, jwtkeys.Claims{User: "u"}, now, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := jwtkeys.Verify(token, reAll, now); err != nil {
				t.Errorf("Verify with reloaded keys: %v", err)
			}
		})
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 2 {
		t.Errorf("folder holds %v (%v), want only the two key files", entries, err)
	}
	assertNoSecrets(t, logs)
	if logs.FilterMessage("generated JWT signing key").Len() != 2 {
		t.Errorf("want one log entry per generated key, got %v", logs.All())
	}
}

func TestOpenRejectsBadEnvironmentNames(t *testing.T) {
	tests := []struct {
		name string
		env  string
	}{
		{name: "empty", env: ""},
		{name: "slash", env: "prod/uction"},
		{name: "traversal", env: "../production"},
		{name: "space", env: "prod uction"},
		{name: "non-ASCII", env: "prödüction"},
		{name: "too long", env: strings.Repeat("a", 65)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := jwtkeys.Open(dir, []string{"production", tt.env}, nil)
			if err == nil || !strings.Contains(err.Error(), "invalid environment name") {
				t.Fatalf("err = %v, want an invalid environment name error", err)
			}
			// Validation happens before anything is written.
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("folder holds %v after a rejected Open", entries)
			}
		})
	}
	t.Run("longest valid name", func(t *testing.T) {
		env := strings.Repeat("a", 60) + "._-9"
		s, err := jwtkeys.Open(t.TempDir(), []string{env}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Environments(); !slices.Equal(got, []string{env}) {
			t.Errorf("Environments = %v", got)
		}
	})
}

func TestOpenRejectsBadKeyFiles(t *testing.T) {
	tests := []struct {
		name    string
		damage  func(t *testing.T, path string)
		wantErr string
	}{
		{name: "group readable", damage: chmod(0o640), wantErr: "must not be readable by group or others"},
		{name: "other readable", damage: chmod(0o604), wantErr: "must not be readable by group or others"},
		{name: "not a regular file", damage: func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "not a regular file"},
		{name: "not JSON", damage: rewrite(func(string) string { return "{" }), wantErr: "unexpected end"},
		{name: "no keys", damage: rewrite(func(string) string { return `{"active":"x","keys":[]}` }), wantErr: "holds no keys"},
		{name: "active kid missing", damage: editKeyFile(func(kf map[string]any) { kf["active"] = "0000000000000000" }), wantErr: "is not one of its keys"},
		{name: "bad private key", damage: editKeyFile(func(kf map[string]any) { firstKey(kf)["private_key"] = "not PEM" }), wantErr: "not a PKCS#8 PEM block"},
		{name: "bad created", damage: editKeyFile(func(kf map[string]any) { firstKey(kf)["created"] = "yesterday" }), wantErr: "created"},
		{name: "duplicate kid", damage: editKeyFile(func(kf map[string]any) {
			kf["keys"] = append(kf["keys"].([]any), kf["keys"].([]any)[0])
		}), wantErr: "duplicate kid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := jwtkeys.Open(dir, []string{"production"}, nil); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "production.json")
			tt.damage(t, path)
			_, err := jwtkeys.Open(dir, []string{"production"}, nil)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), path) {
				t.Fatalf("err = %v, want it to contain %q and the path %s", err, tt.wantErr, path)
			}
		})
	}
}

func chmod(mode os.FileMode) func(*testing.T, string) {
	return func(t *testing.T, path string) {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
}

func rewrite(f func(string) string) func(*testing.T, string) {
	return func(t *testing.T, path string) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(f(string(data))), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func editKeyFile(edit func(map[string]any)) func(*testing.T, string) {
	return func(t *testing.T, path string) {
		rewrite(func(data string) string {
			var kf map[string]any
			if err := json.Unmarshal([]byte(data), &kf); err != nil {
				t.Fatal(err)
			}
			edit(kf)
			out, err := json.Marshal(kf)
			if err != nil {
				t.Fatal(err)
			}
			return string(out)
		})(t, path)
	}
}

func firstKey(kf map[string]any) map[string]any { return kf["keys"].([]any)[0].(map[string]any) }

func TestRotate(t *testing.T) {
	dir := t.TempDir()
	s, err := jwtkeys.Open(dir, []string{"production", "staging"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	oldActive, _ := publicKeys(t, s, "production")
	stagingBefore, _ := publicKeys(t, s, "staging")
	oldToken, err := s.Sign("production", jwtkeys.Claims{User: "before"}, now, 0)
	if err != nil {
		t.Fatal(err)
	}

	kid, err := s.Rotate("production")
	if err != nil {
		t.Fatal(err)
	}
	if kid == oldActive.Kid || !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(kid) {
		t.Fatalf("new kid = %q, want a fresh 16-hex-character kid (old %q)", kid, oldActive.Kid)
	}
	newToken, err := s.Sign("production", jwtkeys.Claims{User: "after"}, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := segment(t, newToken, 0)["kid"]; got != kid {
		t.Errorf("token after rotation has kid %v, want %q", got, kid)
	}
	reopened, err := jwtkeys.Open(dir, []string{"production", "staging"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, store := range map[string]*jwtkeys.Store{"rotated store": s, "reopened store": reopened} {
		t.Run(name, func(t *testing.T) {
			active, all := publicKeys(t, store, "production")
			if active.Kid != kid {
				t.Errorf("active kid = %q, want %q", active.Kid, kid)
			}
			if got, want := kids(all), []string{oldActive.Kid, kid}; !slices.Equal(got, want) {
				t.Errorf("kids = %v, want %v", got, want)
			}
			for _, token := range []string{oldToken, newToken} {
				if _, err := jwtkeys.Verify(token, all, now); err != nil {
					t.Errorf("Verify: %v", err)
				}
			}
			// The old key alone no longer verifies new tokens: they really use the new key.
			if _, err := jwtkeys.Verify(newToken, []jwtkeys.JWK{oldActive}, now); err == nil {
				t.Error("new token verified with the old key")
			}
			if stg, _ := publicKeys(t, store, "staging"); stg != stagingBefore {
				t.Errorf("staging key changed to %+v", stg)
			}
		})
	}
	info, err := os.Stat(filepath.Join(dir, "production.json"))
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o600 {
		t.Errorf("key file mode after rotation = %04o, want 0600", perm)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 2 {
		t.Errorf("folder holds %v (%v), want no temporary files left", entries, err)
	}
}

func TestRotateErrors(t *testing.T) {
	folder, err := jwtkeys.Open(t.TempDir(), []string{"production"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		store  *jwtkeys.Store
		env    string
		wantIs error
	}{
		{name: "unknown environment", store: folder, env: "staging", wantIs: jwtkeys.ErrUnknownEnvironment},
		{name: "settings environment", store: settingsStore(t, "production", "prod-1", 0), env: "production", wantIs: jwtkeys.ErrReadOnly},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if kid, err := tt.store.Rotate(tt.env); !errors.Is(err, tt.wantIs) {
				t.Fatalf("Rotate = %q, %v, want %v", kid, err, tt.wantIs)
			}
		})
	}
}

func TestMerge(t *testing.T) {
	tests := []struct {
		name  string
		merge func(folder, settings *jwtkeys.Store) *jwtkeys.Store
	}{
		{name: "settings into folder", merge: func(folder, settings *jwtkeys.Store) *jwtkeys.Store {
			folder.Merge(settings)
			return folder
		}},
		{name: "folder into settings", merge: func(folder, settings *jwtkeys.Store) *jwtkeys.Store {
			settings.Merge(folder)
			return settings
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			folder, err := jwtkeys.Open(t.TempDir(), []string{"production", "staging"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			folderStaging, _ := publicKeys(t, folder, "staging")
			m := tt.merge(folder, settingsStore(t, "production", "prod-1", 0))
			if got := m.Environments(); !slices.Equal(got, []string{"production", "staging"}) {
				t.Errorf("Environments = %v", got)
			}
			if active, _ := publicKeys(t, m, "production"); active.Kid != "prod-1" {
				t.Errorf("production active kid = %q, want the settings' prod-1", active.Kid)
			}
			if active, _ := publicKeys(t, m, "staging"); active != folderStaging {
				t.Errorf("staging active = %+v, want the folder's %+v", active, folderStaging)
			}
			if _, err := m.Rotate("production"); !errors.Is(err, jwtkeys.ErrReadOnly) {
				t.Errorf("Rotate(production) err = %v, want ErrReadOnly", err)
			}
			if _, err := m.Rotate("staging"); err != nil {
				t.Errorf("Rotate(staging): %v", err)
			}
		})
	}
}
