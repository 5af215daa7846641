package kms_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	awskms "github.com/aws/aws-sdk-go-v2/service/kms"

	"github.com/gantry-dev/gantry/pkg/awstest"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kms/kmstest"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
)

// The same suite runs against every provider: callers switch providers by configuration, so any
// difference in behaviour the suite can see is a bug in one of them.
func TestProviders(t *testing.T) {
	t.Run("keyring", func(t *testing.T) {
		k := newKeyring(t)
		canonical, err := k.ResolveKeyID(context.Background(), kms.AliasMaster)
		if err != nil {
			t.Fatal(err)
		}
		for _, keyID := range []string{kms.AliasMaster, canonical} {
			t.Run(keyID, func(t *testing.T) { testProvider(t, k, keyID) })
		}
	})
	t.Run("aws", func(t *testing.T) {
		p, srv := newFakeAWS(t)
		arn := srv.CreateKey(kms.AliasMaster)
		for _, keyID := range []string{kms.AliasMaster, arn} {
			t.Run(keyID, func(t *testing.T) { testProvider(t, p, keyID) })
		}
	})
}

func newKeyring(t testing.TB) *kms.Keyring {
	t.Helper()
	k, err := kms.OpenKeyring(filepath.Join(t.TempDir(), "keyring.json"), logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// newFakeAWS returns the production AWS provider talking to a fresh fake KMS, retrying only
// transport failures (awstest.ConnectionRetriesOnly).
func newFakeAWS(t *testing.T, optFns ...func(*awskms.Options)) (*kms.AWS, *kmstest.Server) {
	t.Helper()
	srv := kmstest.NewServer()
	t.Cleanup(srv.Close)
	opts := append([]func(*awskms.Options){func(o *awskms.Options) {
		o.Credentials = credentials.NewStaticCredentialsProvider("AKIDTEST", "test-secret", "")
		o.Retryer = awstest.ConnectionRetriesOnly()
	}}, optFns...)
	p, err := kms.NewAWS(context.Background(), kms.AWSConfig{
		Region:         kmstest.Region,
		Endpoint:       srv.URL(),
		ConnectTimeout: 2 * time.Second,
		ReadTimeout:    5 * time.Second,
		MaxConns:       8,
	}, logtest.New(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p, srv
}

// testProvider checks the Provider contract for p, using keyID (an alias or canonical id p holds).
func testProvider(t *testing.T, p kms.Provider, keyID string) {
	ctx := context.Background()
	canonical, err := p.ResolveKeyID(ctx, keyID)
	if err != nil {
		t.Fatalf("ResolveKeyID(%q): %v", keyID, err)
	}
	if again, err := p.ResolveKeyID(ctx, canonical); err != nil || again != canonical {
		t.Fatalf("ResolveKeyID(%q) = %q, %v; want it unchanged", canonical, again, err)
	}
	ec := map[string]string{"purpose": "test", "tenant": "t-1"}

	t.Run("round trip", func(t *testing.T) {
		tests := []struct {
			name      string
			plaintext []byte
			encCtx    map[string]string
			decCtx    map[string]string
		}{
			{"one byte", []byte{0}, ec, ec},
			{"data key sized", bytes.Repeat([]byte{0xab}, 32), ec, ec},
			{"largest", bytes.Repeat([]byte("x"), kms.MaxPlaintextBytes), ec, ec},
			{"nil context", []byte("secret"), nil, nil},
			{"nil then empty context", []byte("secret"), nil, map[string]string{}},
			{"empty then nil context", []byte("secret"), map[string]string{}, nil},
			{"context copy", []byte("secret"), ec, map[string]string{"tenant": "t-1", "purpose": "test"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ct, err := p.Encrypt(ctx, keyID, tt.plaintext, tt.encCtx)
				if err != nil {
					t.Fatalf("Encrypt: %v", err)
				}
				if len(tt.plaintext) >= 8 && bytes.Contains(ct, tt.plaintext) {
					t.Fatal("ciphertext contains the plaintext")
				}
				got, gotKey, err := p.Decrypt(ctx, ct, tt.decCtx)
				if err != nil {
					t.Fatalf("Decrypt: %v", err)
				}
				if !bytes.Equal(got, tt.plaintext) {
					t.Errorf("Decrypt = %x, want %x", got, tt.plaintext)
				}
				if gotKey != canonical {
					t.Errorf("Decrypt key id = %q, want ResolveKeyID's %q", gotKey, canonical)
				}
			})
		}
	})

	t.Run("encryption is randomised", func(t *testing.T) {
		a, errA := p.Encrypt(ctx, keyID, []byte("same"), ec)
		b, errB := p.Encrypt(ctx, keyID, []byte("same"), ec)
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		if bytes.Equal(a, b) {
			t.Error("two encryptions of the same plaintext are identical")
		}
	})

	t.Run("context mismatch", func(t *testing.T) {
		tests := []struct {
			name           string
			encCtx, decCtx map[string]string
		}{
			{"wrong value", ec, map[string]string{"purpose": "test", "tenant": "t-2"}},
			{"extra key", ec, map[string]string{"purpose": "test", "tenant": "t-1", "x": "y"}},
			{"missing key", ec, map[string]string{"purpose": "test"}},
			{"missing context", ec, nil},
			{"unexpected context", nil, ec},
			{"key and value boundary", map[string]string{"a": "bc"}, map[string]string{"ab": "c"}},
			{"key swapped with value", map[string]string{"a": "b"}, map[string]string{"b": "a"}},
			{"empty value is not absent", map[string]string{"a": ""}, nil},
			{"empty key is not absent", map[string]string{"": ""}, nil},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ct, err := p.Encrypt(ctx, keyID, []byte("secret"), tt.encCtx)
				if err != nil {
					t.Fatalf("Encrypt: %v", err)
				}
				if _, _, err := p.Decrypt(ctx, ct, tt.decCtx); !errors.Is(err, kms.ErrInvalidCiphertext) {
					t.Errorf("Decrypt with %v of a blob made with %v: err = %v, want ErrInvalidCiphertext", tt.decCtx, tt.encCtx, err)
				}
			})
		}
	})

	t.Run("tampered", func(t *testing.T) {
		ct, err := p.Encrypt(ctx, keyID, []byte("secret"), ec)
		if err != nil {
			t.Fatal(err)
		}
		// A flip in the header may make the blob name another key, so only the tag's last byte is
		// certain to give ErrInvalidCiphertext; every other position must fail somehow.
		for i := range ct {
			bad := bytes.Clone(ct)
			bad[i] ^= 0x01
			_, _, err := p.Decrypt(ctx, bad, ec)
			if err == nil {
				t.Fatalf("Decrypt succeeded with byte %d of %d flipped", i, len(ct))
			}
			if i == len(ct)-1 && !errors.Is(err, kms.ErrInvalidCiphertext) {
				t.Errorf("flipped last byte: err = %v, want ErrInvalidCiphertext", err)
			}
		}
	})

	t.Run("malformed", func(t *testing.T) {
		ct, err := p.Encrypt(ctx, keyID, []byte("secret"), ec)
		if err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name string
			blob []byte
		}{
			{"nil", nil},
			{"empty", []byte{}},
			{"garbage", []byte("this is not a ciphertext at all, not even close")},
			{"one byte", ct[:1]},
			{"half", ct[:len(ct)/2]},
			{"missing tag byte", ct[:len(ct)-1]},
			{"trailing byte", append(bytes.Clone(ct), 0)},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if _, _, err := p.Decrypt(ctx, tt.blob, ec); !errors.Is(err, kms.ErrInvalidCiphertext) {
					t.Errorf("err = %v, want ErrInvalidCiphertext", err)
				}
			})
		}
	})

	t.Run("unknown key", func(t *testing.T) {
		for _, unknown := range []string{"alias/gantry-no-such-key", "0123456789abcdef0123456789abcdef", "nope", ""} {
			t.Run(unknown, func(t *testing.T) {
				if _, err := p.ResolveKeyID(ctx, unknown); !errors.Is(err, kms.ErrKeyNotFound) {
					t.Errorf("ResolveKeyID err = %v, want ErrKeyNotFound", err)
				}
				if _, err := p.Encrypt(ctx, unknown, []byte("secret"), ec); !errors.Is(err, kms.ErrKeyNotFound) {
					t.Errorf("Encrypt err = %v, want ErrKeyNotFound", err)
				}
				if _, _, err := p.GenerateDataKey(ctx, unknown, ec); !errors.Is(err, kms.ErrKeyNotFound) {
					t.Errorf("GenerateDataKey err = %v, want ErrKeyNotFound", err)
				}
			})
		}
	})

	t.Run("plaintext bounds", func(t *testing.T) {
		for _, n := range []int{0, kms.MaxPlaintextBytes + 1} {
			_, err := p.Encrypt(ctx, keyID, make([]byte, n), ec)
			if err == nil || errors.Is(err, kms.ErrUnavailable) {
				t.Errorf("Encrypt of %d bytes: err = %v, want a plaintext-size error", n, err)
			}
		}
	})

	t.Run("data key", func(t *testing.T) {
		pt, ct, err := p.GenerateDataKey(ctx, keyID, ec)
		if err != nil {
			t.Fatal(err)
		}
		if len(pt) != kms.DataKeySize {
			t.Fatalf("data key is %d bytes, want %d", len(pt), kms.DataKeySize)
		}
		got, gotKey, err := p.Decrypt(ctx, ct, ec)
		if err != nil {
			t.Fatalf("Decrypt: %v", err)
		}
		if !bytes.Equal(got, pt) || gotKey != canonical {
			t.Errorf("Decrypt = %x, %q; want %x, %q", got, gotKey, pt, canonical)
		}
		if _, _, err := p.Decrypt(ctx, ct, nil); !errors.Is(err, kms.ErrInvalidCiphertext) {
			t.Errorf("Decrypt without the context: err = %v, want ErrInvalidCiphertext", err)
		}
		pt2, _, err := p.GenerateDataKey(ctx, keyID, ec)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(pt, pt2) {
			t.Error("two data keys are identical")
		}
	})

	t.Run("random", func(t *testing.T) {
		tests := []struct {
			n       int
			wantErr error
		}{
			{-1, kms.ErrInvalidLength},
			{0, kms.ErrInvalidLength},
			{1, nil},
			{32, nil},
			{kms.MaxRandomBytes, nil},
			{kms.MaxRandomBytes + 1, kms.ErrInvalidLength},
		}
		for _, tt := range tests {
			t.Run(fmt.Sprint(tt.n), func(t *testing.T) {
				b, err := p.GenerateRandom(ctx, tt.n)
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if err == nil && len(b) != tt.n {
					t.Errorf("got %d bytes, want %d", len(b), tt.n)
				}
			})
		}
		a, errA := p.GenerateRandom(ctx, 32)
		b, errB := p.GenerateRandom(ctx, 32)
		if errA != nil || errB != nil || bytes.Equal(a, b) {
			t.Errorf("two 32-byte draws: %x, %x (errors %v, %v); want two different values", a, b, errA, errB)
		}
	})

	t.Run("cancelled context", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		ct, err := p.Encrypt(ctx, keyID, []byte("secret"), ec)
		if err != nil {
			t.Fatal(err)
		}
		calls := map[string]func() error{
			"GenerateRandom":  func() error { _, err := p.GenerateRandom(cctx, 8); return err },
			"Encrypt":         func() error { _, err := p.Encrypt(cctx, keyID, []byte("secret"), ec); return err },
			"Decrypt":         func() error { _, _, err := p.Decrypt(cctx, ct, ec); return err },
			"GenerateDataKey": func() error { _, _, err := p.GenerateDataKey(cctx, keyID, ec); return err },
			"ResolveKeyID":    func() error { _, err := p.ResolveKeyID(cctx, "alias/not-cached"); return err },
		}
		for name, call := range calls {
			if err := call(); !errors.Is(err, context.Canceled) {
				t.Errorf("%s: err = %v, want context.Canceled", name, err)
			}
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				for i := range 10 {
					encCtx := map[string]string{"goroutine": fmt.Sprint(g), "i": fmt.Sprint(i)}
					want := fmt.Appendf(nil, "secret %d/%d", g, i)
					ct, err := p.Encrypt(ctx, keyID, want, encCtx)
					if err != nil {
						t.Errorf("goroutine %d: Encrypt: %v", g, err)
						return
					}
					got, gotKey, err := p.Decrypt(ctx, ct, encCtx)
					if err != nil || !bytes.Equal(got, want) || gotKey != canonical {
						t.Errorf("goroutine %d: Decrypt = %q, %q, %v; want %q, %q", g, got, gotKey, err, want, canonical)
						return
					}
				}
			})
		}
		wg.Wait()
	})
}
