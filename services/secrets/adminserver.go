package secrets

import (
	"context"
	"errors"
	"io"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/audit"
	secretsadminv1 "github.com/gantry-dev/gantry/proto/secretsadmin/v1"
)

// BackupWriter is a store that streams a consistent copy of itself while it serves: one read
// transaction, every write acknowledged before the call included (boltstore.Store.WriteBackup).
type BackupWriter interface {
	WriteBackup(start func(size int64) error, w io.Writer) (int64, error)
}

// backupChunk is the size of each streamed chunk: well under gRPC's default 4 MiB message limit.
const backupChunk = 256 << 10

// AdminServer serves secretsadmin.v1 (the online backup) on the secrets service's own gRPC listener.
// Only callers that authorize accepts reach it: the process decides who (stack: the gateway's
// certificate of the internal CA), this transport never does.
type AdminServer struct {
	secretsadminv1.UnsafeSecretsAdminServiceServer
	store     Store
	authorize func(context.Context) error
	audit     *audit.Sink
	logger    *zap.Logger
}

var _ secretsadminv1.SecretsAdminServiceServer = (*AdminServer)(nil)

// NewAdminServer returns the admin server of store. authorize returns a gRPC status error for a caller
// that may not take a backup; it must refuse by default. Every backup, refused or taken, goes to the
// audit trail (nil: none); a backup is not taken unless its record is written.
func NewAdminServer(store Store, authorize func(context.Context) error, trail *audit.Sink, logger *zap.Logger) *AdminServer {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &AdminServer{store: store, authorize: authorize, audit: trail, logger: logger}
}

// record writes the audit record of a backup call; nil without a trail.
func (a *AdminServer) record(ctx context.Context, outcome audit.Outcome, reason string) error {
	if a.audit == nil {
		return nil
	}
	r := audit.Record{Service: "secrets", Outcome: outcome, Action: "backup", Method: secretsadminv1.SecretsAdminService_Backup_FullMethodName,
		Resource: "store", PrincipalType: "certificate", AuthType: "internal-tls", Reason: reason}
	if p, ok := peer.FromContext(ctx); ok {
		r.ClientAddr = p.Addr.String()
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.VerifiedChains) > 0 && len(info.State.VerifiedChains[0]) > 0 {
			r.Principal = info.State.VerifiedChains[0][0].Subject.CommonName
		}
	}
	return a.audit.Write(r)
}

// Backup streams the store's database file, as of one commit, in chunks; the first carries the size.
func (a *AdminServer) Backup(_ *secretsadminv1.BackupRequest, stream secretsadminv1.SecretsAdminService_BackupServer) error {
	ctx := stream.Context()
	if err := a.authorize(ctx); err != nil {
		a.logger.Warn("backup refused", zap.Error(err))
		_ = a.record(ctx, audit.Denied, status.Convert(err).Message())
		return err
	}
	if err := a.record(ctx, audit.Allowed, ""); err != nil {
		return status.Error(codes.Unavailable, "the audit trail cannot be written: no backup without its record")
	}
	bw, ok := a.store.(BackupWriter)
	if !ok {
		return status.Error(codes.FailedPrecondition, "this store cannot be backed up through gantry (etcd: back up etcd with its snapshot API, `gantry backup -store etcd`; see docs/operations.md, Backups)")
	}
	began := time.Now()
	cw := &chunkWriter{send: stream.Send, buf: make([]byte, 0, backupChunk)}
	n, err := bw.WriteBackup(func(size int64) error {
		cw.size = size
		return ctx.Err()
	}, cw)
	if err == nil {
		err = cw.flush()
	}
	if err != nil {
		a.logger.Warn("backup failed", zap.Int64("bytes_sent", cw.sent), zap.Error(err))
		_ = a.record(ctx, audit.Failed, "the stream failed")
		if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
			return err
		}
		if errors.Is(err, ErrStorage) {
			return status.Error(codes.Unavailable, "storage unavailable")
		}
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		return status.Error(codes.Internal, "backup failed (see the secrets service's log)")
	}
	a.logger.Info("backup streamed", zap.Int64("bytes", n), zap.Duration("took", time.Since(began)))
	return nil
}

// chunkWriter cuts the file into messages; the first message carries the file's size.
type chunkWriter struct {
	send func(*secretsadminv1.BackupResponse) error
	buf  []byte
	size int64
	sent int64
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		k := min(cap(c.buf)-len(c.buf), len(p))
		c.buf = append(c.buf, p[:k]...)
		p, written = p[k:], written+k
		if len(c.buf) == cap(c.buf) {
			if err := c.flush(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

func (c *chunkWriter) flush() error {
	if len(c.buf) == 0 && c.sent > 0 {
		return nil
	}
	msg := &secretsadminv1.BackupResponse{Data: c.buf}
	if c.sent == 0 {
		msg.Size = c.size
	}
	if err := c.send(msg); err != nil {
		return err
	}
	c.sent += int64(len(c.buf))
	// A new buffer: gRPC may still hold the message sent (stats handlers read it lazily).
	c.buf = make([]byte, 0, backupChunk)
	return nil
}
