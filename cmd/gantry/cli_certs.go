package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/gantry-dev/gantry/pkg/gantryclient"
)

func runCerts(args []string, stdout, stderr io.Writer) int {
	return runGroup("certs", "Certificates issued by the server's certificate authorities.", certsActions(), args, stdout, stderr)
}

func certsActions() []subcommand {
	return []subcommand{
		{name: "issue", summary: "issue a certificate (the server generates the key) into key.pem (0600), cert.pem and chain.pem",
			examples: "  gantry certs issue -ca development -cn api.example.com -validity 30 -out-dir ./tls \\\n" +
				"      -from api -user-type service\n  openssl verify -CAfile tls/chain.pem tls/cert.pem\n",
			flags: addCertFlags, run: certsIssue},
		{name: "renew", summary: "renew a service's workload certificate, authenticated by that certificate (-cert/-cert-key): the same CN and SPIFFE ID, a new key",
			examples: "  gantry certs renew -addr https://gantry.example.com -cert tls/cert.pem -cert-key tls/key.pem -out-dir ./tls\n",
			flags:    addRenewFlags, run: certsRenew},
	}
}

type renewFlags struct {
	ca, outDir string
	validity   int
}

func addRenewFlags(fs *flag.FlagSet) any {
	f := &renewFlags{}
	fs.StringVar(&f.ca, "ca", "development", "certificate authority of the workload certificates (the server's -workload-cert-ca)")
	fs.StringVar(&f.outDir, "out-dir", "", "folder to write key.pem, cert.pem and chain.pem to (default: the folder of -cert)")
	fs.IntVar(&f.validity, "validity", 0, "validity in days (0: the CA's maximum)")
	return f
}

// certsRenew asks for a certificate with the CN and SPIFFE ID of the current one, authenticated by
// the current one: a service renews its identity with nothing but its certificate and key.
func certsRenew(ctx context.Context, env *cliEnv, _ []string, flags any) error {
	f := flags.(*renewFlags)
	if env.flags.certFile == "" {
		return usageErrorf("want -cert (and -cert-key): the certificate to renew is also the credential")
	}
	if f.validity < 0 {
		return usageErrorf("-validity %d is negative", f.validity)
	}
	data, err := os.ReadFile(env.flags.certFile)
	if err != nil {
		return usageErrorf("-cert: %v", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return usageErrorf("-cert %s holds no PEM certificate", env.flags.certFile)
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return usageErrorf("-cert: %v", err)
	}
	var sans []string
	for _, u := range leaf.URIs {
		if u.Scheme == "spiffe" {
			sans = append(sans, u.String())
		}
	}
	if len(sans) != 1 {
		return usageErrorf("-cert %s has %d SPIFFE IDs; a workload certificate has one", env.flags.certFile, len(sans))
	}
	outDir := f.outDir
	if outDir == "" {
		outDir = filepath.Dir(env.flags.certFile)
	}
	api, err := env.api(ctx)
	if err != nil {
		return err
	}
	issued, err := api.IssueCertificate(ctx, gantryclient.CertificateRequest{CA: f.ca, CN: leaf.Subject.CommonName, SANs: sans, Validity: f.validity})
	if err != nil {
		return err
	}
	return writeIssued(env, outDir, issued)
}

type certFlags struct {
	ca, cn, keyType, outDir string
	sans                    []string
	validity                int
}

func addCertFlags(fs *flag.FlagSet) any {
	f := &certFlags{}
	fs.StringVar(&f.ca, "ca", "development", "name of the certificate authority (gantry serves 'development' by default)")
	fs.StringVar(&f.cn, "cn", "", "common name of the certificate (required)")
	fs.Func("san", "subject alternative name (repeatable)", func(v string) error { f.sans = append(f.sans, v); return nil })
	fs.IntVar(&f.validity, "validity", 0, "validity in days (0: the CA's maximum)")
	fs.StringVar(&f.keyType, "key-type", "", "rsa or ecdsa (default: the server's)")
	fs.StringVar(&f.outDir, "out-dir", "", "folder to write key.pem, cert.pem and chain.pem to (required; created 0700 if missing)")
	return f
}

// certFiles are the files gantry certs issue writes, with their modes: the key is for its owner only.
var certFiles = []struct {
	name string
	mode os.FileMode
	pem  func(gantryclient.IssuedCertificate) string
}{
	{"key.pem", 0o600, func(c gantryclient.IssuedCertificate) string { return c.Key }},
	{"cert.pem", 0o644, func(c gantryclient.IssuedCertificate) string { return c.Certificate }},
	{"chain.pem", 0o644, func(c gantryclient.IssuedCertificate) string { return c.CertificateChain }},
}

func certsIssue(ctx context.Context, env *cliEnv, _ []string, flags any) error {
	f := flags.(*certFlags)
	if f.cn == "" || f.outDir == "" || f.ca == "" {
		return usageErrorf("want -ca, -cn and -out-dir")
	}
	if f.validity < 0 {
		return usageErrorf("-validity %d is negative", f.validity)
	}
	api, err := env.api(ctx)
	if err != nil {
		return err
	}
	issued, err := api.IssueCertificate(ctx, gantryclient.CertificateRequest{CA: f.ca, CN: f.cn, SANs: f.sans, Validity: f.validity, KeyType: f.keyType})
	if err != nil {
		return err
	}
	return writeIssued(env, f.outDir, issued)
}

// writeIssued writes an issued certificate's files into outDir and prints where they are.
func writeIssued(env *cliEnv, outDir string, issued gantryclient.IssuedCertificate) error {
	if issued.Key == "" || issued.Certificate == "" {
		return fmt.Errorf("the server's answer has no key or certificate")
	}
	if err := os.MkdirAll(outDir, 0o700); err != nil {
		return err
	}
	written := map[string]string{}
	for _, file := range certFiles {
		path := filepath.Join(outDir, file.name)
		if err := writeFileAtomic(path, []byte(file.pem(issued)), file.mode); err != nil {
			return err
		}
		written[file.name] = path
	}
	notAfter := ""
	if block, _ := pem.Decode([]byte(issued.Certificate)); block != nil {
		if leaf, err := x509.ParseCertificate(block.Bytes); err == nil {
			notAfter = leaf.NotAfter.UTC().Format(time.RFC3339)
		}
	}
	if env.json {
		return printJSON(env.stdout, map[string]string{
			"key": written["key.pem"], "certificate": written["cert.pem"], "certificate_chain": written["chain.pem"], "not_after": notAfter,
		})
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "key\t%s (mode 0600)\n", written["key.pem"])
	fmt.Fprintf(tw, "certificate\t%s\n", written["cert.pem"])
	fmt.Fprintf(tw, "chain\t%s\n", written["chain.pem"])
	fmt.Fprintf(tw, "valid until\t%s\n", notAfter)
	return tw.Flush()
}

// writeFileAtomic writes data to path with mode through a temporary file in the same folder, so the
// key is never readable with a looser mode (as rewriting an existing file in place would leave it) and
// a crash leaves the old file or the new one, whole.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
