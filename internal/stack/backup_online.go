package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/gantry-dev/gantry/pkg/secretfile"
	secretsadminv1 "github.com/gantry-dev/gantry/proto/secretsadmin/v1"
)

// OnlineBackup is how gantry backup reaches a running secrets service to stream its database.
type OnlineBackup struct {
	// Addr is the secrets service's gRPC address (its -secrets-listen).
	Addr string
	// Credentials load the gateway's certificate of the internal CA: the one identity the service
	// streams a backup to (see backupAuthorizer). Called only when the database is in use.
	Credentials func() (credentials.TransportCredentials, error)
	// Timeout bounds the whole stream; 0 means 10 minutes. The service holds one read transaction while
	// it streams, so a stalled copy must not last.
	Timeout time.Duration
}

// stream writes the running service's database to path, a new file that appears whole or not at all,
// and checks that as many bytes came as the service announced.
func (o *OnlineBackup) stream(path string) error {
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	creds, err := o.Credentials()
	if err != nil {
		return fmt.Errorf("the gateway's certificate: %w", err)
	}
	conn, err := grpc.NewClient(o.Addr, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20)))
	if err != nil {
		return err
	}
	defer conn.Close()
	stream, err := secretsadminv1.NewSecretsAdminServiceClient(conn).Backup(ctx, &secretsadminv1.BackupRequest{})
	if err != nil {
		return err
	}
	return secretfile.WriteNew(path, func(w io.Writer) error {
		var size, got int64
		for first := true; ; first = false {
			msg, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			if first {
				size = msg.GetSize()
			}
			n, err := w.Write(msg.GetData())
			got += int64(n)
			if err != nil {
				return err
			}
		}
		if size <= 0 || got != size {
			return fmt.Errorf("the stream ended after %d bytes of %d: the copy is incomplete", got, size)
		}
		return nil
	})
}
