package internaltls

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Files Init writes into each leaf's folder: the CA certificate every peer is verified against, and
// the leaf's own key pair. They are what -grpc-tls-ca-file, -grpc-tls-cert-file and
// -grpc-tls-key-file take.
const (
	LeafCAFile   = "ca.crt"
	LeafCertFile = "tls.crt"
	LeafKeyFile  = "tls.key"
)

// LeafSpec is one certificate Init issues: its name (CN and DNS SAN), whether it may also serve
// (server and client auth, valid for localhost and the loopback addresses besides its name) and the
// folder it goes to, which holds nothing else of the PKI (never the CA key).
type LeafSpec struct {
	Name   string
	Server bool
	Dir    string
}

// Roles of the generated PKI, as LeafSpecs without a folder: the gateway's certificate (the one
// identity the services trust with gateway-only metadata and the admin gRPC listener answers), a
// service's (secrets, chat), and a direct caller's (client only: it reaches the service APIs and
// nothing else).
var (
	GatewayLeaf = LeafSpec{Name: DefaultGatewayName, Server: true}
	ServiceLeaf = LeafSpec{Name: DefaultServerName, Server: true}
	ClientLeaf  = LeafSpec{Name: ClientName}
)

// Init is the one-shot initialisation of a split deployment (docker-compose's tls-init service):
// it creates the internal CA in caDir, or loads it, and gives every leaf a folder of its own with
// ca.crt, tls.crt and tls.key, so that each process holds only its own key and none holds ca.key. A
// leaf already there is kept while it is signed by this CA, carries its name and is more than 30
// days from its end; otherwise it is issued again. Running Init again is how leaves are renewed.
func Init(caDir string, specs []LeafSpec, logger *zap.Logger) error {
	if logger == nil {
		logger = zap.NewNop()
	}
	if err := os.MkdirAll(caDir, 0o700); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(caDir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()

	ca, caKey, err := ensureCA(caDir, logger)
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(filepath.Join(caDir, caCertFile))
	if err != nil {
		return err
	}
	pool, err := loadPool(filepath.Join(caDir, caCertFile))
	if err != nil {
		return err
	}
	for _, spec := range specs {
		if spec.Name == "" || spec.Dir == "" {
			return fmt.Errorf("a leaf needs a name and a folder")
		}
		if filepath.Clean(spec.Dir) == filepath.Clean(caDir) {
			return fmt.Errorf("%s: a leaf's folder must not be the CA's (it would hand out ca.key)", spec.Dir)
		}
		if err := os.MkdirAll(spec.Dir, 0o700); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(spec.Dir, LeafCAFile), caPEM, 0o600); err != nil {
			return err
		}
		l := leaf{file: "tls", name: spec.Name, usage: clientUsage, local: spec.Server}
		if spec.Server {
			l.usage = serverUsage
		}
		pair, err := loadPair(filepath.Join(spec.Dir, LeafCertFile), filepath.Join(spec.Dir, LeafKeyFile), pool)
		if err == nil && hasName(pair.Leaf, spec.Name) && time.Until(pair.Leaf.NotAfter) > renewBefore {
			logger.Info("internal TLS leaf kept", zap.String("name", spec.Name), zap.String("dir", spec.Dir),
				zap.Time("not_after", pair.Leaf.NotAfter))
			continue
		}
		if _, err := issueLeaf(spec.Dir, l, ca, caKey, pool); err != nil {
			return fmt.Errorf("issue %s into %s: %w", spec.Name, spec.Dir, err)
		}
		logger.Info("internal TLS leaf issued", zap.String("name", spec.Name), zap.String("dir", spec.Dir))
	}
	return nil
}
