package ca_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/acmpca"

	"github.com/gantry-dev/gantry/pkg/ca"
	"github.com/gantry-dev/gantry/pkg/ca/acmpcatest"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
)

// csrFor makes a CSR the way a client would.
func csrFor(t *testing.T, keyType, cn string, dns ...string) (keyPEM, csrPEM []byte) {
	t.Helper()
	keyPEM, csrPEM, err := ca.NewKeyAndCSR(ca.KeyRequest{KeyType: keyType, Subject: pkix.Name{CommonName: cn}, DNSNames: dns,
		IPAddresses: []net.IP{net.ParseIP("10.0.0.7")}})
	if err != nil {
		t.Fatal(err)
	}
	return keyPEM, csrPEM
}

// verifyLeaf checks an issued certificate the way a TLS peer would: the chain ends in a self-signed
// root, the leaf verifies through it for the DNS name, and the leaf has the end-entity profile.
func verifyLeaf(t *testing.T, got ca.Issued, dnsName string, maxDays int) *x509.Certificate {
	t.Helper()
	leaves, err := ca.ParseCertificates([]byte(got.Certificate))
	if err != nil || len(leaves) != 1 {
		t.Fatalf("certificate: %v, %d certificates", err, len(leaves))
	}
	chain, err := ca.ParseCertificates([]byte(got.Chain))
	if err != nil || len(chain) == 0 {
		t.Fatalf("chain: %v, %d certificates", err, len(chain))
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	root := chain[len(chain)-1]
	if root.CheckSignatureFrom(root) != nil {
		t.Fatalf("the chain does not end in a self-signed root: %s", root.Subject)
	}
	roots.AddCert(root)
	for _, c := range chain[:len(chain)-1] {
		inter.AddCert(c)
	}
	leaf := leaves[0]
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: dnsName, Roots: roots, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("leaf does not verify against the chain: %v", err)
	}
	if leaf.IsCA {
		t.Error("leaf is a CA")
	}
	if leaf.KeyUsage != x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment {
		t.Errorf("key usage %b", leaf.KeyUsage)
	}
	if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}) {
		t.Errorf("extended key usage %v", leaf.ExtKeyUsage)
	}
	if life := leaf.NotAfter.Sub(leaf.NotBefore); life > time.Duration(maxDays)*24*time.Hour+10*time.Minute {
		t.Errorf("lifetime %v exceeds %d days", life, maxDays)
	}
	if len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.ParseIP("10.0.0.7")) {
		t.Errorf("IP SANs %v", leaf.IPAddresses)
	}
	return leaf
}

func TestLocalGeneratesPersistsAndIssues(t *testing.T) {
	ctx := context.Background()
	for _, intermediate := range []bool{true, false} {
		t.Run(map[bool]string{true: "intermediate", false: "root only"}[intermediate], func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ca", "dev")
			l, err := ca.OpenLocal(ca.LocalConfig{Name: "dev", Dir: dir, Intermediate: intermediate}, logtest.New(t))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"ca.key", "root.key"} {
				st, err := os.Stat(filepath.Join(dir, f))
				if f == "root.key" && !intermediate {
					if err == nil {
						t.Errorf("root.key written without an intermediate")
					}
					continue
				}
				if err != nil || st.Mode().Perm() != 0o600 {
					t.Errorf("%s: %v, mode %v, want 0600", f, err, st.Mode().Perm())
				}
			}
			info, err := l.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if (info.Chain != "") != intermediate {
				t.Errorf("chain %q with intermediate=%v", info.Chain, intermediate)
			}
			for _, keyType := range []string{ca.KeyRSA, ca.KeyECDSA} {
				_, csr := csrFor(t, keyType, "api.example.com", "api.example.com", "api.internal")
				got, err := l.Issue(ctx, csr, 30)
				if err != nil {
					t.Fatal(err)
				}
				leaf := verifyLeaf(t, got, "api.internal", 30)
				if leaf.Subject.CommonName != "api.example.com" || !slices.Equal(leaf.DNSNames, []string{"api.example.com", "api.internal"}) {
					t.Errorf("subject %s, SANs %v", leaf.Subject, leaf.DNSNames)
				}
			}

			// A restart loads the same CA instead of making a new one.
			again, err := ca.OpenLocal(ca.LocalConfig{Name: "dev", Dir: dir, Intermediate: intermediate}, nil)
			if err != nil {
				t.Fatal(err)
			}
			info2, _ := again.Info(ctx)
			if info2.Certificate != info.Certificate || info2.Chain != info.Chain {
				t.Error("reopening generated a different CA")
			}
		})
	}
}

func TestLocalFromConfiguredFiles(t *testing.T) {
	ctx := context.Background()
	// A generated CA's files stand in for an operator's PEM files.
	gen := filepath.Join(t.TempDir(), "gen")
	if _, err := ca.OpenLocal(ca.LocalConfig{Name: "corp", Dir: gen, Intermediate: true}, nil); err != nil {
		t.Fatal(err)
	}
	l, err := ca.OpenLocal(ca.LocalConfig{Name: "corp", CertFile: filepath.Join(gen, "ca.crt"), KeyFile: filepath.Join(gen, "ca.key"),
		ChainFile: filepath.Join(gen, "chain.pem")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, csr := csrFor(t, ca.KeyECDSA, "db", "db.example.com")
	got, err := l.Issue(ctx, csr, 7)
	if err != nil {
		t.Fatal(err)
	}
	verifyLeaf(t, got, "db.example.com", 7)

	// A key that does not belong to the certificate is refused at start.
	other := filepath.Join(t.TempDir(), "other")
	if _, err := ca.OpenLocal(ca.LocalConfig{Name: "x", Dir: other}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.OpenLocal(ca.LocalConfig{CertFile: filepath.Join(gen, "ca.crt"), KeyFile: filepath.Join(other, "ca.key")}, nil); err == nil {
		t.Error("mismatched key accepted")
	}
	if _, err := ca.OpenLocal(ca.LocalConfig{CertFile: filepath.Join(gen, "ca.crt")}, nil); err == nil {
		t.Error("certificate without key accepted")
	}
}

func TestParseCSR(t *testing.T) {
	_, good := csrFor(t, ca.KeyECDSA, "x")
	tampered := slices.Clone(good)
	tampered[len(tampered)/2] ^= 0x01
	for name, in := range map[string][]byte{
		"empty":    nil,
		"not PEM":  []byte("hello"),
		"wrong":    []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
		"tampered": tampered,
	} {
		if _, err := ca.ParseCSR(in); !errors.Is(err, ca.ErrInvalidCSR) {
			t.Errorf("%s: %v, want ErrInvalidCSR", name, err)
		}
	}
	csr, err := ca.ParseCSR(good)
	if err != nil || csr.Subject.CommonName != "x" {
		t.Fatalf("good CSR: %v %v", csr, err)
	}
	if _, ok := csr.PublicKey.(*ecdsa.PublicKey); !ok {
		t.Errorf("key type %T", csr.PublicKey)
	}
}

func newFakeACM(t *testing.T) (*acmpcatest.Server, *acmpca.Client) {
	t.Helper()
	srv := acmpcatest.NewServer()
	t.Cleanup(srv.Close)
	client, err := ca.NewACMClient(context.Background(), ca.ACMClientConfig{Region: acmpcatest.Region, Endpoint: srv.URL()},
		func(o *acmpca.Options) {
			o.Credentials = credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", "")
			o.Retryer = aws.NopRetryer{}
		})
	if err != nil {
		t.Fatal(err)
	}
	return srv, client
}

func TestACMIssueAndInfo(t *testing.T) {
	ctx := context.Background()
	srv, client := newFakeACM(t)
	tags := map[string]string{"team": "infra", "env": "prod", "owner": "sec"}
	arn := srv.CreateCA("prod", tags)
	srv.TagPageSize(2) // three tags: two pages
	a, err := ca.NewACM(client, ca.ACMConfig{ARN: arn, PollInterval: time.Millisecond}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	info, err := a.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Tags) != 3 || info.Tags["team"] != "infra" || info.Tags["owner"] != "sec" {
		t.Errorf("tags %v, want %v", info.Tags, tags)
	}
	if info.Chain != srv.RootPEM(arn) {
		t.Error("CA chain is not the root")
	}

	srv.PendingPolls(3) // ACM is still signing for the first three polls
	_, csr := csrFor(t, ca.KeyRSA, "svc.example.com", "svc.example.com")
	got, err := a.Issue(ctx, csr, 45)
	if err != nil {
		t.Fatal(err)
	}
	verifyLeaf(t, got, "svc.example.com", 45)
	if n := srv.Requests("GetCertificate"); n != 4 {
		t.Errorf("GetCertificate called %d times, want 4 (3 in progress + 1)", n)
	}
	if days, alg, _ := srv.LastIssued(); days != 45 || alg != ca.DefaultACMSigningAlgorithm {
		t.Errorf("sent validity %d, algorithm %s", days, alg)
	}
}

func TestACMErrors(t *testing.T) {
	ctx := context.Background()
	srv, client := newFakeACM(t)
	arn := srv.CreateCA("prod", nil)
	a, err := ca.NewACM(client, ca.ACMConfig{ARN: arn, PollInterval: time.Millisecond, PollAttempts: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, csr := csrFor(t, ca.KeyECDSA, "x", "x.example.com")

	srv.FailNext(1, 400, "ThrottlingException")
	if _, err := a.Issue(ctx, csr, 1); !errors.Is(err, ca.ErrUnavailable) {
		t.Errorf("throttled: %v, want ErrUnavailable", err)
	}
	srv.FailNext(1, 400, "MalformedCSRException")
	if _, err := a.Issue(ctx, csr, 1); !errors.Is(err, ca.ErrInvalidCSR) {
		t.Errorf("malformed: %v, want ErrInvalidCSR", err)
	}
	srv.PendingPolls(5) // more than PollAttempts
	_, csr2 := csrFor(t, ca.KeyECDSA, "y", "y.example.com")
	if _, err := a.Issue(ctx, csr2, 1); !errors.Is(err, ca.ErrUnavailable) {
		t.Errorf("never issued: %v, want ErrUnavailable", err)
	}
	missing, _ := ca.NewACM(client, ca.ACMConfig{ARN: arn + "0"}, nil)
	if _, err := missing.Info(ctx); !errors.Is(err, ca.ErrUnavailable) {
		t.Errorf("unknown CA: %v, want ErrUnavailable", err)
	}
	if _, err := ca.NewACM(client, ca.ACMConfig{ARN: arn, SigningAlgorithm: "MD5"}, nil); err == nil {
		t.Error("unknown signing algorithm accepted")
	}
	if _, err := a.Issue(ctx, []byte("nope"), 1); !errors.Is(err, ca.ErrInvalidCSR) {
		t.Errorf("bad CSR: %v", err)
	}
}
