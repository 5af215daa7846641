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
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// BackupWriter is a store that streams a consistent copy of itself while it serves: one read
// transaction, every write acknowledged before the call included (boltstore.Store.WriteBackup).
type BackupWriter interface {
	WriteBackup(start func(size int64) error, w io.Writer) (int64, error)
}

// backupChunk is the size of each streamed chunk: well under gRPC's default 4 MiB message limit.
const backupChunk = 256 << 10

// AdminServer serves secretsadmin.v1 (the online backup, the rewrap of data keys) on the secrets
// service's own gRPC listener. Only callers that authorize accepts reach it: the process decides who
// (stack: the gateway's certificate of the internal CA), this transport never does.
type AdminServer struct {
	secretsadminv1.UnsafeSecretsAdminServiceServer
	svc       *Service
	store     store.Store
	authorize func(context.Context) error
	audit     *audit.Sink
	logger    *zap.Logger
}

var _ secretsadminv1.SecretsAdminServiceServer = (*AdminServer)(nil)

// NewAdminServer returns the admin server of svc. authorize returns a gRPC status error for a caller
// that may not administer the service; it must refuse by default. Every call, refused or served, goes
// to the audit trail (nil: none); nothing is done unless its record is written.
func NewAdminServer(svc *Service, authorize func(context.Context) error, trail *audit.Sink, logger *zap.Logger) *AdminServer {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &AdminServer{svc: svc, store: svc.Store(), authorize: authorize, audit: trail, logger: logger}
}

// record writes the audit record of an admin call; nil without a trail.
func (a *AdminServer) record(ctx context.Context, action, method string, outcome audit.Outcome, reason string) error {
	if a.audit == nil {
		return nil
	}
	r := audit.Record{Service: "secrets", Outcome: outcome, Action: action, Method: method,
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
	record := func(outcome audit.Outcome, reason string) error {
		return a.record(ctx, "backup", secretsadminv1.SecretsAdminService_Backup_FullMethodName, outcome, reason)
	}
	if err := a.authorize(ctx); err != nil {
		a.logger.Warn("backup refused", zap.Error(err))
		_ = record(audit.Denied, status.Convert(err).Message())
		return err
	}
	if err := record(audit.Allowed, ""); err != nil {
		return status.Error(codes.Unavailable, "the audit trail cannot be written: no backup without its record")
	}
	bw, ok := a.store.(BackupWriter)
	if !ok {
		return status.Error(codes.FailedPrecondition, "this store cannot be backed up through gantry (etcd: back up etcd with its snapshot API, `gantry backup -store etcd`; see docs/backup-and-restore.md, etcd)")
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
		_ = record(audit.Failed, "the stream failed")
		if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
			return err
		}
		if errors.Is(err, store.ErrStorage) {
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

// Rewrap runs one batch of a rewrap pass (Service.Rewrap).
func (a *AdminServer) Rewrap(ctx context.Context, req *secretsadminv1.RewrapRequest) (*secretsadminv1.RewrapResponse, error) {
	action := "rewrap"
	if req.GetDryRun() {
		action = "rewrap_dry_run"
	}
	record := func(outcome audit.Outcome, reason string) error {
		return a.record(ctx, action, secretsadminv1.SecretsAdminService_Rewrap_FullMethodName, outcome, reason)
	}
	if err := a.authorize(ctx); err != nil {
		a.logger.Warn("rewrap refused", zap.Error(err))
		_ = record(audit.Denied, status.Convert(err).Message())
		return nil, err
	}
	if err := record(audit.Allowed, ""); err != nil {
		return nil, status.Error(codes.Unavailable, "the audit trail cannot be written: no rewrap without its record")
	}
	res, err := a.svc.Rewrap(ctx, RewrapOptions{PageToken: req.GetPageToken(), Limit: int(req.GetBatchSize()), DryRun: req.GetDryRun()})
	if err != nil {
		a.logger.Warn("rewrap batch failed", zap.Error(err))
		return nil, toStatus(a.logger, err)
	}
	if res.Rewrapped > 0 || res.Undecryptable > 0 || res.KeyCheck == "rewrapped" {
		a.logger.Info("rewrap batch", zap.Bool("dry_run", req.GetDryRun()), zap.Int("scanned", res.Scanned), zap.Int("rewrapped", res.Rewrapped),
			zap.Int("changed", res.Changed), zap.Int("undecryptable", res.Undecryptable), zap.String("active", res.Active), zap.String("key_check", res.KeyCheck))
	}
	out := &secretsadminv1.RewrapResponse{Scanned: int64(res.Scanned), Rewrapped: int64(res.Rewrapped), Current: int64(res.Current),
		Changed: int64(res.Changed), Undecryptable: int64(res.Undecryptable), UndecryptableIds: res.UndecryptableIDs,
		ByKeyVersion: make(map[string]int64, len(res.ByKeyVersion)), Active: res.Active, KeyCheck: res.KeyCheck, NextPageToken: res.NextPageToken}
	for version, n := range res.ByKeyVersion {
		out.ByKeyVersion[version] = int64(n)
	}
	return out, nil
}

// KeyUse scans the store and reads the running replicas' keys (Service.KeyUse).
func (a *AdminServer) KeyUse(ctx context.Context, _ *secretsadminv1.KeyUseRequest) (*secretsadminv1.KeyUseResponse, error) {
	record := func(outcome audit.Outcome, reason string) error {
		return a.record(ctx, "key_use", secretsadminv1.SecretsAdminService_KeyUse_FullMethodName, outcome, reason)
	}
	if err := a.authorize(ctx); err != nil {
		a.logger.Warn("key use refused", zap.Error(err))
		_ = record(audit.Denied, status.Convert(err).Message())
		return nil, err
	}
	if err := record(audit.Allowed, ""); err != nil {
		return nil, status.Error(codes.Unavailable, "the audit trail cannot be written: no key scan without its record")
	}
	use, err := a.svc.KeyUse(ctx)
	if err != nil {
		a.logger.Warn("key use scan failed", zap.Error(err))
		return nil, toStatus(a.logger, err)
	}
	out := &secretsadminv1.KeyUseResponse{Revisions: int64Counts(use.Revisions), Archived: int64Counts(use.Archived), Changes: int64Counts(use.Changes),
		KeyCheck: use.KeyCheck, Active: use.Active, Self: use.Self}
	for _, r := range use.Replicas {
		out.Replicas = append(out.Replicas, &secretsadminv1.ReplicaKeys{Name: r.Name, Active: r.Active, Held: r.Held,
			Published: r.Published.UTC().Format(time.RFC3339)})
	}
	return out, nil
}

func int64Counts(m map[string]int) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, n := range m {
		out[k] = int64(n)
	}
	return out
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
