package etcdstore

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/etcdtest"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/secrets/store/storetest"
)

// testPKI writes a CA, a server certificate for 127.0.0.1 and a client certificate into dir and
// returns their files.
func testPKI(t *testing.T, dir string) (caFile, serverCert, serverKey, clientCert, clientKey string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test etcd CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", keyDER)
	}
	caFile = write("ca.pem", "CERTIFICATE", caDER)
	serverCert, serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	clientCert, clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return
}

// TestEtcdStoreOverTLS: a store on members that serve https and require a client certificate
// connects to every member with the CA and the client certificate of its settings (each member on a
// connection of its own, besides the etcd client's), reads and writes, and its probe keeps every
// member in service.
func TestEtcdStoreOverTLS(t *testing.T) {
	dir := t.TempDir()
	caFile, serverCert, serverKey, clientCert, clientKey := testPKI(t, dir)
	c := etcdtest.New(t, 3, zap.NewNop(), etcdtest.ClientTLS(serverCert, serverKey, caFile))
	opts := DefaultOptions()
	opts.Endpoints = c.Endpoints()
	opts.Prefix = "/tls/"
	opts.CAFile, opts.CertFile, opts.KeyFile = caFile, clientCert, clientKey
	opts.ProbeInterval = 50 * time.Millisecond
	s, err := Open(context.Background(), opts, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec := storetest.NewCred("c1", "c1", 1)
	storetest.PutCred(t, s, rec, 0)
	storetest.CheckCred(t, s, "c1", 1, rec)
	// Every member answers the probe over TLS: a full round of probes leaves all three in service,
	// and each serves a read of its own.
	for i := range 3 {
		m := s.router.members[i]
		st, err := m.status.Status(context.Background(), &etcdserverpb.StatusRequest{})
		if err != nil || st.Leader == 0 {
			t.Fatalf("member %s over TLS: %v %v", m.endpoint, st, err)
		}
		if _, err := m.kv.Get(context.Background(), "x"); err != nil {
			t.Fatalf("read on member %s over TLS: %v", m.endpoint, err)
		}
	}
	if !inService(s, 0) || !inService(s, 1) || !inService(s, 2) {
		t.Errorf("a member over TLS out of service")
	}

	// Without the client certificate the members refuse the connection: Open fails.
	noCert := opts
	noCert.CertFile, noCert.KeyFile = "", ""
	noCert.DialTimeout = 2 * time.Second
	if s2, err := Open(context.Background(), noCert, zap.NewNop()); err == nil {
		s2.Close()
		t.Fatal("Open without the client certificate the members require succeeded")
	}
}
