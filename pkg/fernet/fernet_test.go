package fernet_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/fernet"
)

// The spec's test vectors (github.com/fernet/spec at 20dead47: generate.json, verify.json,
// invalid.json), copied unchanged into testdata/.
type vector struct {
	Desc   string `json:"desc"`
	Token  string `json:"token"`
	Now    string `json:"now"`
	IVInts []int  `json:"iv"`
	TTL    int    `json:"ttl_sec"`
	Src    string `json:"src"`
	Secret string `json:"secret"`
}

func load(t *testing.T, name string) []vector {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var vs []vector
	if err := json.Unmarshal(data, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) == 0 {
		t.Fatalf("%s holds no vectors", name)
	}
	return vs
}

func parseNow(t *testing.T, s string) time.Time {
	t.Helper()
	now, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return now
}

func TestSpecGenerate(t *testing.T) {
	for _, v := range load(t, "generate.json") {
		key, err := fernet.ParseKey(v.Secret)
		if err != nil {
			t.Fatal(err)
		}
		var iv [16]byte
		if len(v.IVInts) != 16 {
			t.Fatalf("iv has %d bytes", len(v.IVInts))
		}
		for i, b := range v.IVInts {
			iv[i] = byte(b)
		}
		if got := key.EncryptWithIV([]byte(v.Src), parseNow(t, v.Now), iv); got != v.Token {
			t.Errorf("token\n got %s\nwant %s", got, v.Token)
		}
	}
}

func TestSpecVerify(t *testing.T) {
	for _, v := range load(t, "verify.json") {
		key, err := fernet.ParseKey(v.Secret)
		if err != nil {
			t.Fatal(err)
		}
		got, err := key.DecryptTTL(v.Token, time.Duration(v.TTL)*time.Second, parseNow(t, v.Now))
		if err != nil || string(got) != v.Src {
			t.Errorf("DecryptTTL = %q, %v; want %q", got, err, v.Src)
		}
		if got, err := key.Decrypt(v.Token); err != nil || string(got) != v.Src {
			t.Errorf("Decrypt = %q, %v; want %q", got, err, v.Src)
		}
	}
}

func TestSpecInvalid(t *testing.T) {
	for _, v := range load(t, "invalid.json") {
		t.Run(v.Desc, func(t *testing.T) {
			key, err := fernet.ParseKey(v.Secret)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := key.DecryptTTL(v.Token, time.Duration(v.TTL)*time.Second, parseNow(t, v.Now)); !errors.Is(err, fernet.ErrInvalidToken) {
				t.Errorf("DecryptTTL = %q, %v; want ErrInvalidToken", got, err)
			}
		})
	}
}

func TestRoundTripAndWrongKey(t *testing.T) {
	a, _ := fernet.ParseKey("cw_0x689RpI-jtRR7oE8h_eQsKImvJapLeSbXpwF4e4=")
	b, _ := fernet.ParseKey("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
	for _, msg := range []string{"", "x", "0123456789abcdef", `{"api_key": "s3cr3t"}`} {
		token, err := a.Encrypt([]byte(msg), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if got, err := a.Decrypt(token); err != nil || string(got) != msg {
			t.Errorf("Decrypt(Encrypt(%q)) = %q, %v", msg, got, err)
		}
		if _, err := b.Decrypt(token); !errors.Is(err, fernet.ErrInvalidToken) {
			t.Errorf("another key opened the token: %v", err)
		}
	}
	for _, bad := range []string{"", "short", "cw_0x689RpI-jtRR7oE8h_eQsKImvJapLeSbXpwF4e4", "cw_0x689RpI+jtRR7oE8h/eQsKImvJapLeSbXpwF4e4="} {
		if _, err := fernet.ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
}

// TestPythonCryptographyInterop: a token made by Python's cryptography (the library Confidant
// encrypts with; testdata/python-cryptography.json) opens here, and a token made here opens there
// when python3 with cryptography is installed (skipped otherwise).
func TestPythonCryptographyInterop(t *testing.T) {
	data, err := os.ReadFile("testdata/python-cryptography.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vector
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	key, err := fernet.ParseKey(v.Secret)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := key.Decrypt(v.Token); err != nil || string(got) != v.Src {
		t.Fatalf("Decrypt = %q, %v", got, err)
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	if exec.Command(python, "-c", "import cryptography.fernet").Run() != nil {
		t.Skip("python3 lacks cryptography")
	}
	token, err := key.Encrypt([]byte("made in Go"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(python, "-c", "import sys; from cryptography.fernet import Fernet; sys.stdout.write(Fernet(sys.argv[1].encode()).decrypt(sys.argv[2].encode()).decode())", v.Secret, token).CombinedOutput()
	if err != nil || string(out) != "made in Go" {
		t.Fatalf("python could not open a Go token: %s %v", out, err)
	}
}
