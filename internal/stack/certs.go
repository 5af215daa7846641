package stack

import (
	"context"
	"fmt"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/ca"
	"github.com/gantry-dev/gantry/services/secrets"
)

// caFolder is the folder of generated local CAs inside the data folder, one subfolder per CA name.
const caFolder = "ca"

// openCAs builds the certificate authority of every configured CA name: local CAs generated into (or
// loaded from) the data folder or configured PEM files, or ACM Private CAs sharing one AWS client.
func openCAs(ctx context.Context, cfg Config, logger *zap.Logger) (map[string]ca.Authority, error) {
	certs := cfg.Secrets.Certs
	out := make(map[string]ca.Authority, len(certs.CAs))
	if certs.CAType == secrets.CATypeACM {
		client, err := ca.NewACMClient(ctx, ca.ACMClientConfig{Region: cfg.Secrets.AWSRegion, Endpoint: certs.ACMEndpoint})
		if err != nil {
			return nil, err
		}
		for _, name := range certs.CAs {
			s := certs.Settings(name)
			a, err := ca.NewACM(client, ca.ACMConfig{ARN: s.ARN, SigningAlgorithm: s.SigningAlgorithm, TemplateARN: s.TemplateARN},
				logger.Named("ca").With(zap.String("ca", name)))
			if err != nil {
				return nil, fmt.Errorf("CA %q: %w", name, err)
			}
			out[name] = a
		}
		return out, nil
	}
	for _, name := range certs.CAs {
		s := certs.Settings(name)
		a, err := ca.OpenLocal(ca.LocalConfig{
			Name: name, Dir: filepath.Join(cfg.DataDir, caFolder, name), Intermediate: certs.Intermediate,
			CertFile: s.CertFile, KeyFile: s.KeyFile, ChainFile: s.ChainFile,
		}, logger.Named("ca"))
		if err != nil {
			return nil, fmt.Errorf("CA %q: %w", name, err)
		}
		out[name] = a
	}
	return out, nil
}
