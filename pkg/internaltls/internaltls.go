// Package internaltls secures gantry's internal gRPC traffic (gateway to services, chat to secrets,
// the admin listener) with mutual TLS, and tells services which peer is the gateway.
//
// With no configuration it keeps a private certificate authority in a folder (by default
// <data-dir>/tls) and issues the certificates gantry's roles need: the first process to start
// creates them, under a file lock, and every other process sharing the folder (split targets,
// docker-compose containers on one volume) loads the same CA. Operators can bring their own CA and
// key pair instead, or opt out into plaintext for a mesh that encrypts in a sidecar.
//
// Services trust gateway-only metadata (x-proxy-internal, the caller identity, header-login headers,
// chat's custom internal headers) from a peer whose verified certificate names the gateway; from any
// other caller only the metadata a direct client may send survives (see DirectCallerMetadata).
package internaltls

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/settings"
	"github.com/gantry-dev/gantry/pkg/wirekeys"
)

// Default names in the generated certificates: services are verified as DefaultServerName, and a
// client certificate naming DefaultGatewayName is the gateway.
const (
	DefaultServerName  = "gantry-service"
	DefaultGatewayName = "gantry-gateway"
	// ClientName is the name of the generated certificate for direct callers (grpcurl, scripts).
	ClientName = "gantry-client"
)

// Config selects how internal gRPC is secured.
type Config struct {
	// Dir holds the generated CA and certificates; empty means <data-dir>/tls.
	Dir string
	// CAFile, CertFile and KeyFile, all three together, replace the generated PKI with the operator's:
	// the CA every peer's certificate must chain to, and this process's own key pair.
	CAFile, CertFile, KeyFile string
	// ServerName is the name verified in a service's certificate; empty verifies the dialled host.
	ServerName string
	// GatewayName is the name (CN, DNS or URI SAN) that makes a client certificate the gateway's.
	GatewayName string
	// Plaintext turns TLS off on every internal gRPC port, and trusts every peer as the gateway.
	Plaintext bool
}

// DefaultConfig generates the PKI in the data folder.
func DefaultConfig() Config {
	return Config{ServerName: DefaultServerName, GatewayName: DefaultGatewayName}
}

// Settings declares the internal TLS settings for the settings table (group "internal-tls").
func (c *Config) Settings() settings.Part {
	const group = "internal-tls"
	return settings.Part{Settings: []settings.Setting{
		{Name: "grpc-tls-dir", Group: group, Value: settings.String(&c.Dir), Default: "<data-dir>/tls", Usage: "folder of the generated internal CA and certificates; share it between split targets"},
		{Name: "grpc-tls-ca-file", Group: group, Value: settings.String(&c.CAFile), Usage: "PEM CA of internal gRPC (with -grpc-tls-cert-file and -grpc-tls-key-file, all three together: use these instead of generated ones)"},
		{Name: "grpc-tls-cert-file", Group: group, Value: settings.String(&c.CertFile), Usage: "PEM certificate of this process for internal gRPC (server and client)"},
		{Name: "grpc-tls-key-file", Group: group, Value: settings.String(&c.KeyFile), Usage: "PEM private key of -grpc-tls-cert-file"},
		{Name: "grpc-tls-server-name", Group: group, Value: settings.String(&c.ServerName), Usage: "name verified in the services' certificates (empty: the dialled host)"},
		{Name: "grpc-tls-gateway-name", Group: group, Value: settings.String(&c.GatewayName), Usage: "name a client certificate must carry (CN or SAN) for a service to trust it as the gateway"},
		{Name: "grpc-plaintext", Group: group, Value: settings.Bool(&c.Plaintext), Usage: "UNSAFE: internal gRPC without TLS, every peer trusted as the gateway (only behind a mesh that encrypts and authenticates)"},
	}}
}

// Validate reports the first bad setting.
func (c Config) Validate() error {
	if c.Plaintext {
		return nil
	}
	set := 0
	for _, v := range []string{c.CAFile, c.CertFile, c.KeyFile} {
		if v != "" {
			set++
		}
	}
	if set != 0 && set != 3 {
		return settings.Invalid("grpc-tls-ca-file", "-grpc-tls-ca-file, -grpc-tls-cert-file and -grpc-tls-key-file must be set together")
	}
	if c.GatewayName == "" {
		return settings.Invalid("grpc-tls-gateway-name", "must not be empty")
	}
	return nil
}

// Operator reports whether the operator's files replace the generated PKI.
func (c Config) Operator() bool { return c.CertFile != "" }

// Role is the part a process plays on an internal connection; it picks the generated certificate.
type Role int

// Roles.
const (
	// RoleGateway dials the services and serves the admin gRPC listener.
	RoleGateway Role = iota
	// RoleService serves secrets and chat, and dials secrets from chat.
	RoleService
)

// Internal is the loaded TLS material of one process.
type Internal struct {
	cfg      Config
	pool     *x509.CertPool
	gateway  tls.Certificate // the gateway's key pair (the operator's one pair in operator mode)
	service  tls.Certificate
	selfName string // a name in the gateway certificate, for dialling the admin listener
	// clientPool is pool plus the CAs of workloads' client certificates (TrustWorkloadCAs), for the
	// services' listeners; nil when none are trusted.
	clientPool *x509.CertPool
	// gatewayChains caches FromGateway's verification of chains to the internal CA (see verifyGateway).
	gatewayChains chainCache
}

// TrustWorkloadCAs makes the services' listeners also accept client certificates of the workload
// CAs (services authenticating with their own certificate on direct gRPC). Such a certificate is
// never the gateway's, whatever it names: FromGateway then also requires a chain to the internal CA.
// Call it before ServerOptions.
func (in *Internal) TrustWorkloadCAs(pemCerts []byte) error {
	if in.cfg.Plaintext {
		return nil
	}
	pool := in.pool.Clone()
	if !pool.AppendCertsFromPEM(pemCerts) {
		return errors.New("internaltls: no PEM certificate among the workload CAs")
	}
	in.clientPool = pool
	return nil
}

// Load reads (or, in the generated mode, first creates) the TLS material. dataDir is used when
// cfg.Dir is empty. Nothing is loaded with Plaintext, and the caller is warned loudly.
func Load(cfg Config, dataDir string, logger *zap.Logger) (*Internal, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Plaintext {
		logger.Warn("INTERNAL gRPC IS NOT ENCRYPTED (-grpc-plaintext): secret values and tokens cross the network in clear text, " +
			"and any peer that reaches a service port is trusted as the gateway. Use it only behind a mesh that does mutual TLS.")
		return &Internal{cfg: cfg}, nil
	}
	in := &Internal{cfg: cfg}
	if cfg.Operator() {
		pool, err := loadPool(cfg.CAFile)
		if err != nil {
			return nil, settings.Invalid("grpc-tls-ca-file", "%v", err)
		}
		pair, err := loadPair(cfg.CertFile, cfg.KeyFile, pool)
		if err != nil {
			return nil, settings.Invalid("grpc-tls-cert-file", "%v", err)
		}
		in.pool, in.gateway, in.service = pool, pair, pair
		logger.Info("internal gRPC uses mutual TLS", zap.String("cert", cfg.CertFile), zap.String("name", certName(pair.Leaf)),
			zap.Bool("gateway_identity", hasName(pair.Leaf, cfg.GatewayName)))
	} else {
		dir := cfg.Dir
		if dir == "" {
			if dataDir == "" {
				return nil, settings.Invalid("grpc-tls-dir", "no folder for the internal CA: set -data-dir or -grpc-tls-dir")
			}
			dir = dataDir + string(os.PathSeparator) + "tls"
		}
		pki, err := ensurePKI(dir, logger)
		if err != nil {
			return nil, settings.Invalid("grpc-tls-dir", "%v", err)
		}
		in.pool, in.gateway, in.service = pki.pool, pki.gateway, pki.service
		logger.Info("internal gRPC uses mutual TLS", zap.String("dir", dir),
			zap.String("direct_callers", "present "+dir+"/client.crt with its key; verify "+DefaultServerName+" against "+dir+"/ca.crt"))
	}
	in.selfName = certName(in.gateway.Leaf)
	return in, nil
}

// Plaintext reports whether TLS is off.
func (in *Internal) Plaintext() bool { return in.cfg.Plaintext }

// ServerCredentials are the credentials of a gRPC listener of role: TLS 1.3 with a client
// certificate required and verified against the CA.
func (in *Internal) ServerCredentials(role Role) credentials.TransportCredentials {
	if in.cfg.Plaintext {
		return insecure.NewCredentials()
	}
	clientCAs := in.pool
	if role == RoleService && in.clientPool != nil {
		clientCAs = in.clientPool
	}
	return credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{in.pair(role)},
		ClientCAs:    clientCAs,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	})
}

// ClientCredentials are the credentials of a connection role opens to a service: its certificate,
// and the service verified against the CA under ServerName.
func (in *Internal) ClientCredentials(role Role) credentials.TransportCredentials {
	if in.cfg.Plaintext {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{in.pair(role)},
		RootCAs:      in.pool,
		ServerName:   in.cfg.ServerName,
		MinVersion:   tls.VersionTLS13,
	})
}

// SelfClientCredentials dial a listener of this same process that serves with the gateway
// certificate (the admin gRPC listener).
func (in *Internal) SelfClientCredentials() credentials.TransportCredentials {
	if in.cfg.Plaintext {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{in.gateway},
		RootCAs:      in.pool,
		ServerName:   in.selfName,
		MinVersion:   tls.VersionTLS13,
	})
}

func (in *Internal) pair(role Role) tls.Certificate {
	if role == RoleGateway {
		return in.gateway
	}
	return in.service
}

// DirectCallerMetadata is the metadata a caller other than the gateway may send a service: the
// credentials every client presents (kmsauth, sessions and their XSRF token) and a request id.
// Everything else (x-proxy-internal, the caller identity, the trusted headers of header login,
// chat's internal headers under any name) is the gateway's to assert, so it is dropped: deny by
// default, and a header added to a service's checks later is safe without touching this list.
var DirectCallerMetadata = []string{wirekeys.Authorization, wirekeys.AuthFrom, wirekeys.AuthToken, wirekeys.Cookie, wirekeys.XSRFToken, wirekeys.RequestID}

// FromGateway reports whether the peer of ctx presented a verified certificate naming the gateway.
// With Plaintext every peer is the gateway.
func (in *Internal) FromGateway(ctx context.Context) bool {
	if in.cfg.Plaintext {
		return true
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return false
	}
	leaf := info.State.VerifiedChains[0][0]
	if !hasName(leaf, in.cfg.GatewayName) {
		return false
	}
	if in.clientPool == nil {
		return true
	}
	// The listener also trusts workload CAs: only a chain to the internal CA makes the gateway.
	return in.gatewayChains.verified(leaf, info.State.PeerCertificates, time.Now(), func() bool {
		inter := x509.NewCertPool()
		for _, c := range info.State.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		_, err := leaf.Verify(x509.VerifyOptions{Roots: in.pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		return err == nil
	})
}

// chainCache remembers the outcome of verifying a peer's certificate chain to the internal CA, so a
// connection's (or the in-process gateway's) every call does not redo the signature checks: the
// verification was most of the cost of FromGateway, which runs on every call (an ECDSA verification
// per certificate, about a quarter of a credential read's CPU). An entry is keyed by the SHA-256 of
// every certificate the peer presented, so a different chain never matches; a success holds until
// the earliest expiry of those certificates and at most chainCacheTTL, a failure for chainCacheTTL.
// The internal CA does not change while the process runs. The cache is small and cleared whole when
// full: only chains naming the gateway reach it, and a peer presenting many of them only makes its
// own calls slower.
type chainCache struct {
	mu      sync.Mutex
	entries map[[sha256.Size]byte]chainVerdict
}

type chainVerdict struct {
	ok    bool
	until time.Time
}

const (
	chainCacheTTL     = 5 * time.Minute
	chainCacheEntries = 128
)

// verified returns the cached verdict on the chain presented, or verify's, which it then caches.
func (c *chainCache) verified(leaf *x509.Certificate, presented []*x509.Certificate, now time.Time, verify func() bool) bool {
	h := sha256.New()
	notAfter := leaf.NotAfter
	for _, cert := range presented {
		h.Write(cert.Raw)
		if cert.NotAfter.Before(notAfter) {
			notAfter = cert.NotAfter
		}
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])
	c.mu.Lock()
	v, hit := c.entries[key]
	c.mu.Unlock()
	if hit && now.Before(v.until) {
		return v.ok
	}
	v = chainVerdict{ok: verify(), until: now.Add(chainCacheTTL)}
	if v.ok && notAfter.Before(v.until) {
		v.until = notAfter
	}
	c.mu.Lock()
	if c.entries == nil || len(c.entries) >= chainCacheEntries {
		c.entries = make(map[[sha256.Size]byte]chainVerdict, chainCacheEntries)
	}
	c.entries[key] = v
	c.mu.Unlock()
	return v.ok
}

// trusted returns ctx with the incoming metadata a non-gateway peer may not set removed.
func (in *Internal) trusted(ctx context.Context) context.Context {
	if in.FromGateway(ctx) {
		return ctx
	}
	md, _ := metadata.FromIncomingContext(ctx)
	kept := metadata.MD{}
	for _, k := range DirectCallerMetadata {
		if v := md.Get(k); len(v) > 0 {
			kept[k] = v
		}
	}
	return metadata.NewIncomingContext(ctx, kept)
}

// ServerOptions are the options of a gRPC server of role: its TLS credentials, and interceptors, run
// before any other, that keep gateway-only metadata from other peers.
func (in *Internal) ServerOptions(role Role) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.Creds(in.ServerCredentials(role)),
		grpc.ChainUnaryInterceptor(in.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(in.StreamInterceptor()),
	}
}

// UnaryInterceptor keeps gateway-only metadata from every peer but the gateway: the interceptor of
// ServerOptions, for a server that lists its interceptors itself (grpcserver.NewService). It must run
// before any interceptor that reads metadata.
func (in *Internal) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return handler(in.trusted(ctx), req)
	}
}

// StreamInterceptor is UnaryInterceptor for streams.
func (in *Internal) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &trustedStream{ServerStream: ss, ctx: in.trusted(ss.Context())})
	}
}

// InProcessPeer is the peer the services of this process see on a call the gateway of the same
// process makes in process (package inprocgrpc, with no connection): the gateway's identity as a
// verified mutual-TLS handshake presents it (its certificate chain, verified to the internal CA), so
// FromGateway and every check that reads the peer's certificate decide exactly as on the network.
// No remote caller can produce it: a peer comes from a connection's handshake, never from anything a
// caller sends, and this one exists only in the contexts inprocgrpc builds for the connection object
// the gateway holds. With Plaintext it carries no credentials (every peer is the gateway then).
func (in *Internal) InProcessPeer(addr net.Addr) (*peer.Peer, error) {
	p := &peer.Peer{Addr: addr, LocalAddr: addr}
	if in.cfg.Plaintext {
		return p, nil
	}
	var chain []*x509.Certificate
	for _, der := range in.gateway.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("internaltls: the gateway certificate: %w", err)
		}
		chain = append(chain, c)
	}
	if len(chain) == 0 {
		return nil, errors.New("internaltls: no gateway certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	verified, err := chain[0].Verify(x509.VerifyOptions{Roots: in.pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		return nil, fmt.Errorf("internaltls: the gateway certificate does not verify as a client of the internal CA: %w", err)
	}
	p.AuthInfo = credentials.TLSInfo{
		State: tls.ConnectionState{Version: tls.VersionTLS13, HandshakeComplete: true, ServerName: in.cfg.ServerName,
			PeerCertificates: chain, VerifiedChains: verified},
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity},
	}
	return p, nil
}

// AdminServerOptions are the options of the admin gRPC listener (proxyadmin, in the gateway
// process): the gateway's TLS credentials, and interceptors, run before any other, that refuse every
// call whose peer is not the gateway with PermissionDenied. The admin service can drain the gateway,
// change its log levels, profile it and stop it, so least privilege inside means that no other
// identity of the internal CA (a service's certificate, the direct callers' client.crt, any other leaf)
// reaches it, not even its health or reflection services: deny by default. The gateway's own
// connection (the admin HTTP listener dials it) is the one caller. With Plaintext every peer is the
// gateway, as everywhere else.
func (in *Internal) AdminServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.Creds(in.ServerCredentials(RoleGateway)),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			if !in.FromGateway(ctx) {
				return nil, errAdminDenied
			}
			return handler(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			if !in.FromGateway(ss.Context()) {
				return errAdminDenied
			}
			return handler(srv, ss)
		}),
	}
}

// errAdminDenied is the answer of the admin gRPC listener to any peer but the gateway. It names the
// rule, not the peer's certificate.
var errAdminDenied = status.Error(codes.PermissionDenied, "the admin gRPC service answers only the gateway's certificate; use the admin HTTP listener")

type trustedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *trustedStream) Context() context.Context { return s.ctx }

// hasName reports whether cert carries name as its CN or a DNS or URI SAN.
func hasName(cert *x509.Certificate, name string) bool {
	if name == "" {
		return false
	}
	if cert.Subject.CommonName == name || slices.Contains(cert.DNSNames, name) {
		return true
	}
	for _, u := range cert.URIs {
		if u.String() == name {
			return true
		}
	}
	return false
}

// certName is a name to verify cert under: its first DNS SAN, else its CN.
func certName(cert *x509.Certificate) string {
	if cert == nil {
		return ""
	}
	if len(cert.DNSNames) > 0 {
		return cert.DNSNames[0]
	}
	return cert.Subject.CommonName
}

var errNoCerts = errors.New("no PEM certificate")

func loadPool(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s: %w", file, errNoCerts)
	}
	return pool, nil
}

// DirectClientCredentials are the credentials of a direct caller (a tool, a test, an internal Go
// client) using the generated client certificate of a PKI folder: it connects as ClientName, which
// services treat like any outside client (no gateway-only metadata). serverName is verified in the
// server's certificate; empty verifies the dialled host (the generated certificates are valid for
// localhost, 127.0.0.1 and ::1 besides their names).
func DirectClientCredentials(dir, serverName string) (credentials.TransportCredentials, error) {
	sep := string(os.PathSeparator)
	return FileClientCredentials(dir+sep+caCertFile, dir+sep+"client.crt", dir+sep+"client.key", serverName)
}

// GatewayClientCredentials present the generated gateway certificate of a PKI folder, for the
// operator's tools that act as the gateway (gantry backup streaming a running store): whoever can read
// the folder's gateway.key is trusted as the gateway anyway. serverName as DirectClientCredentials.
func GatewayClientCredentials(dir, serverName string) (credentials.TransportCredentials, error) {
	sep := string(os.PathSeparator)
	return FileClientCredentials(dir+sep+caCertFile, dir+sep+"gateway.crt", dir+sep+"gateway.key", serverName)
}

// FileClientCredentials present the key pair certFile and keyFile (the key must be private, the
// certificate signed by caFile) and verify the server against caFile under serverName.
func FileClientCredentials(caFile, certFile, keyFile, serverName string) (credentials.TransportCredentials, error) {
	pool, err := loadPool(caFile)
	if err != nil {
		return nil, err
	}
	pair, err := loadPair(certFile, keyFile, pool)
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS13}), nil
}
