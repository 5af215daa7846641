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
	chatadminv1 "github.com/gantry-dev/gantry/proto/chatadmin/v1"
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
	// ChatAddr is the chat service's gRPC address (its -chat-listen), which streams the inbound
	// queue file (chat-queue.db: the requests in flight and the dead letters) when the data folder
	// holds one; the same credentials authenticate the call.
	ChatAddr string
}

// backupChunk is what both admin backup streams send: the next bytes of the file, and in the first
// message its whole size.
type backupChunk interface {
	GetData() []byte
	GetSize() int64
}

// stream writes the running secrets service's database to path, a new file that appears whole or
// not at all, and checks that as many bytes came as the service announced.
func (o *OnlineBackup) stream(path string) error {
	return o.receive(o.Addr, path, func(ctx context.Context, conn *grpc.ClientConn) (func() (backupChunk, error), error) {
		stream, err := secretsadminv1.NewSecretsAdminServiceClient(conn).Backup(ctx, &secretsadminv1.BackupRequest{})
		if err != nil {
			return nil, err
		}
		return func() (backupChunk, error) { return stream.Recv() }, nil
	})
}

// streamQueue writes the running chat service's inbound queue file to path, as stream does.
func (o *OnlineBackup) streamQueue(path string) error {
	return o.receive(o.ChatAddr, path, func(ctx context.Context, conn *grpc.ClientConn) (func() (backupChunk, error), error) {
		stream, err := chatadminv1.NewChatAdminServiceClient(conn).BackupQueue(ctx, &chatadminv1.BackupQueueRequest{})
		if err != nil {
			return nil, err
		}
		return func() (backupChunk, error) { return stream.Recv() }, nil
	})
}

// receive dials addr with the gateway's certificate, opens a backup stream with open, and writes
// what it receives to path, a new file that appears whole or not at all, checking that as many bytes
// came as the service announced.
func (o *OnlineBackup) receive(addr, path string, open func(context.Context, *grpc.ClientConn) (func() (backupChunk, error), error)) error {
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
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20)))
	if err != nil {
		return err
	}
	defer conn.Close()
	recv, err := open(ctx, conn)
	if err != nil {
		return err
	}
	return secretfile.WriteNew(path, func(w io.Writer) error {
		var size, got int64
		for first := true; ; first = false {
			msg, err := recv()
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
