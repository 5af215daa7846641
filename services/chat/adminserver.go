package chat

import (
	"context"
	"io"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/audit"
	chatadminv1 "github.com/gantry-dev/gantry/proto/chatadmin/v1"
)

// QueueBackupWriter is an inbound queue that streams a consistent copy of its file while it serves
// (boltqueue.Queue.WriteBackup); a queue on SQS is none.
type QueueBackupWriter interface {
	WriteBackup(start func(size int64) error, w io.Writer) (int64, error)
}

// queueBackupChunk is the size of each streamed chunk: well under gRPC's default 4 MiB message limit.
const queueBackupChunk = 256 << 10

// AdminServer serves chatadmin.v1 (the online backup of the inbound queue) on the chat service's own
// gRPC listener. Only callers that authorize accepts reach it: the process decides who (stack: the
// gateway's certificate of the internal CA, as for secretsadmin.v1), this transport never does.
type AdminServer struct {
	chatadminv1.UnsafeChatAdminServiceServer
	queue     any
	authorize func(context.Context) error
	audit     *audit.Sink
	logger    *zap.Logger
}

var _ chatadminv1.ChatAdminServiceServer = (*AdminServer)(nil)

// NewAdminServer returns the admin server of the inbound queue q (a QueueBackupWriter, or not: then
// BackupQueue answers FailedPrecondition). authorize returns a gRPC status error for a caller that
// may not administer the service; it must refuse by default. Every call, refused or served, goes to
// the audit trail (nil: none); nothing is streamed unless its record is written.
func NewAdminServer(q any, authorize func(context.Context) error, trail *audit.Sink, logger *zap.Logger) *AdminServer {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &AdminServer{queue: q, authorize: authorize, audit: trail, logger: logger}
}

// BackupQueue streams the queue file, as of one commit, in chunks; the first carries the size.
func (a *AdminServer) BackupQueue(_ *chatadminv1.BackupQueueRequest, stream chatadminv1.ChatAdminService_BackupQueueServer) error {
	ctx := stream.Context()
	if err := a.authorize(ctx); err != nil {
		a.logger.Warn("queue backup refused", zap.Error(err))
		_ = a.record(ctx, audit.Denied, status.Convert(err).Message())
		return err
	}
	if err := a.record(ctx, audit.Allowed, ""); err != nil {
		return status.Error(codes.Unavailable, "the audit trail cannot be written: no backup without its record")
	}
	bw, ok := a.queue.(QueueBackupWriter)
	if !ok {
		return status.Error(codes.FailedPrecondition, "this inbound queue cannot be backed up through gantry (SQS keeps its messages itself)")
	}
	began := time.Now()
	var size, sent int64
	buf := make([]byte, 0, queueBackupChunk)
	flush := func() error {
		if len(buf) == 0 && sent > 0 {
			return nil
		}
		msg := &chatadminv1.BackupQueueResponse{Data: buf}
		if sent == 0 {
			msg.Size = size
		}
		if err := stream.Send(msg); err != nil {
			return err
		}
		sent += int64(len(buf))
		buf = buf[:0]
		return nil
	}
	n, err := bw.WriteBackup(func(s int64) error {
		size = s
		return ctx.Err()
	}, writerFunc(func(p []byte) (int, error) {
		for written := 0; written < len(p); {
			k := copy(buf[len(buf):cap(buf)], p[written:])
			buf, written = buf[:len(buf)+k], written+k
			if len(buf) == cap(buf) {
				if err := flush(); err != nil {
					return written, err
				}
			}
		}
		return len(p), nil
	}))
	if err == nil {
		err = flush()
	}
	if err != nil {
		a.logger.Warn("queue backup failed", zap.Int64("bytes_sent", sent), zap.Error(err))
		_ = a.record(ctx, audit.Failed, "the stream failed")
		if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
			return err
		}
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		return status.Error(codes.Internal, "queue backup failed (see the chat service's log)")
	}
	a.logger.Info("queue backup streamed", zap.Int64("bytes", n), zap.Duration("took", time.Since(began)))
	return nil
}

// record writes the audit record of an admin call; nil without a trail.
func (a *AdminServer) record(ctx context.Context, outcome audit.Outcome, reason string) error {
	if a.audit == nil {
		return nil
	}
	r := audit.Record{Service: "chat", Outcome: outcome, Action: "backup", Method: chatadminv1.ChatAdminService_BackupQueue_FullMethodName,
		Resource: "queue", PrincipalType: "certificate", AuthType: "internal-tls", Reason: reason}
	if p, ok := peer.FromContext(ctx); ok {
		r.ClientAddr = p.Addr.String()
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.VerifiedChains) > 0 && len(info.State.VerifiedChains[0]) > 0 {
			r.Principal = info.State.VerifiedChains[0][0].Subject.CommonName
		}
	}
	return a.audit.Write(r)
}

// writerFunc is an io.Writer of a function.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
