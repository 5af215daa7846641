package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/pkg/iamroles"
	"github.com/gantry-dev/gantry/pkg/jwtkeys"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/secretfile"
	"github.com/gantry-dev/gantry/pkg/settings"
	"github.com/gantry-dev/gantry/pkg/stats"
	"github.com/gantry-dev/gantry/services/secrets"
	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/boltstore"
	"github.com/gantry-dev/gantry/services/secrets/store/etcdstore"
)

// Files of the data folder.
const (
	keyringFile    = "keyring.json"
	databaseFile   = "secrets.db"
	sessionKeyFile = "session.key"
	grantsFile     = "grants.json" // grants of versions before they moved into the store; imported at start
	chatQueueFile  = "chat-queue.db"
)

// openSecrets builds the secrets domain service over its KMS provider and store (bbolt or etcd), and
// returns it with the CAs of services' client certificates (secrets.WorkloadCAPEM; nil: none). What
// it opens is closed when the stack stops, newest first: the service (flushing webhooks), the IAM
// roles cache, the store.
func openSecrets(ctx context.Context, p *process, logger *zap.Logger) (*secrets.Service, []byte, error) {
	cfg := p.cfg
	db, provider, err := openSecretsStore(ctx, cfg, p.life, logger)
	if err != nil {
		return nil, nil, err
	}
	secretsCfg := cfg.Secrets
	if secretsCfg.Auth.SessionSecret == "" {
		if secretsCfg.Auth.SessionSecret, err = sessionSecret(cfg.DataDir); err != nil {
			return nil, nil, err
		}
	}
	jwt, err := openJWTKeys(cfg, logger)
	if err != nil {
		return nil, nil, err
	}
	deps := secrets.Deps{Store: db, KMS: provider, ACL: cfg.SecretsACL, JWTKeys: jwt, Logger: logger, Audit: p.audit, Stats: p.stats}
	storeGauges(db, p.stats)
	if deps.CAs, err = openCAs(ctx, cfg, logger); err != nil {
		return nil, nil, err
	}
	// Services' client certificates are verified against the workload CA (by default the local CA
	// "development"); the same PEM goes to the gRPC listeners and the gateway's REST listener.
	workloadPEM, err := secrets.WorkloadCAPEM(ctx, cfg.Secrets.Auth, deps.CAs)
	if err != nil {
		return nil, nil, err
	}
	if deps.WorkloadCerts, err = secrets.NewWorkloadCertVerifier(cfg.Secrets.Auth, workloadPEM); err != nil {
		return nil, nil, err
	}
	if err := grantsAndRoles(ctx, cfg, provider, &deps, p.life.onStop, logger); err != nil {
		return nil, nil, err
	}
	svc, err := secrets.NewService(ctx, secretsCfg, deps)
	if err != nil {
		return nil, nil, err
	}
	p.life.onStop(svc.Close)
	if !secretsCfg.Auth.UseAuth {
		logger.Warn("AUTHENTICATION IS OFF (USE_AUTH=false): every caller is \"unauthenticated user\" with full access")
	}
	return svc, workloadPEM, nil
}

// openSecretsStore opens the secrets store, closed when the stack stops, and the KMS over it, and
// proves they belong together: a keyring that already protected data is refused beside a store that
// is missing or empty (keyringUse), and keys that do not open the store's key-check value are
// refused (openKeys).
func openSecretsStore(ctx context.Context, cfg Config, life *lifecycle, logger *zap.Logger) (store.Store, kms.Provider, error) {
	warnOpenDataDir(cfg.DataDir, logger)
	use, err := keyringUse(cfg)
	if err != nil {
		return nil, nil, err
	}
	if use != nil && cfg.Secrets.Store != "etcd" {
		// Checked before opening, which would create the file.
		if _, err := os.Stat(filepath.Join(cfg.DataDir, databaseFile)); errors.Is(err, os.ErrNotExist) {
			return nil, nil, lostStoreError(cfg, use, "does not exist")
		}
	}
	db, err := openStore(ctx, cfg, logger)
	if err != nil {
		return nil, nil, err
	}
	life.onStop(func() {
		if err := db.Close(); err != nil {
			logger.Warn("closing the store", zap.Error(err))
		}
	})
	if use != nil {
		inUse, err := storeInUse(ctx, db)
		if err == nil && !inUse {
			err = lostStoreError(cfg, use, "is empty (no key-check value, no credential, service or archive)")
		}
		if err != nil {
			return nil, nil, err
		}
	}
	provider, err := openKeys(ctx, cfg, db, logger)
	if err != nil {
		return nil, nil, err
	}
	if ring, ok := provider.(*kms.Keyring); ok {
		// The store now holds a key-check value that opens with this keyring: from here on an empty
		// store beside it is a lost one (see keyringUse).
		if err := ring.MarkUsed(storeName(cfg)); err != nil {
			return nil, nil, fmt.Errorf("data-dir: record the keyring's use: %w", err)
		}
	}
	return db, provider, nil
}

// storeGauges publishes the depth of the store's write queue and how long its writes have been
// stalled, when it has them (bbolt).
func storeGauges(db store.Store, st *stats.Store) {
	if q, ok := db.(interface{ WriteQueueDepth() int }); ok {
		st.GaugeFunc("secrets.store.write_queue_depth", func() int64 { return int64(q.WriteQueueDepth()) })
	}
	if q, ok := db.(interface{ WriteStalledFor() time.Duration }); ok {
		st.GaugeFunc("secrets.store.write_stalled_seconds", func() int64 {
			// Rounded up: a stall under a second (a short stall timeout) still reads as one.
			return int64((q.WriteStalledFor() + time.Second - 1) / time.Second)
		})
	}
}

// OpenImporter opens the secrets store and the KMS exactly as serving does (the same settings, the
// same refusal of keys that do not fit the store), for `gantry import confidant`, and returns the
// domain's importer over them. close closes the store.
func OpenImporter(ctx context.Context, cfg Config, logger *zap.Logger) (importer *secrets.Importer, close func(), err error) {
	if err := cfg.ValidateImport(); err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("data-dir: %w", err)
	}
	warnOpenDataDir(cfg.DataDir, logger)
	store, err := openStore(ctx, cfg, logger)
	if err != nil {
		return nil, nil, err
	}
	provider, err := openKeys(ctx, cfg, store, logger)
	if err != nil {
		_ = store.Close()
		if cfg.Secrets.KMS != "aws" && errors.Is(err, kms.ErrKeyNotFound) {
			// Confidant's env file sets KMS_MASTER_KEY to Confidant's AWS KMS key, which a local
			// keyring never holds: say which setting to change, for the import and gantry serve alike.
			err = settings.Invalid("kms-master-key", "%q is not in the local keyring (-kms=local), which holds alias/gantry-master: Confidant's env file names its AWS KMS key there. With the local keyring set GANTRY_KMS_MASTER_KEY=alias/gantry-master or pass -kms-master-key alias/gantry-master (either wins over KMS_MASTER_KEY); to seal under Confidant's key instead, run with -kms=aws", cfg.Secrets.KMSMasterKey)
		}
		return nil, nil, err
	}
	importer = secrets.NewImporter(store, provider, cfg.Secrets.KMSMasterKey, cfg.Secrets.DataKeyCacheSize, logger.Named("import"))
	if cfg.Secrets.KMS != "aws" {
		// With the local keyring gantry keeps the grants Confidant had in KMS: record them for every
		// imported service, or its kmsauth tokens would be refused. With AWS KMS the grants Confidant
		// made on the auth key are KMS's own and carry over by themselves.
		importer.SetGrants(secrets.NewStoreGrants(store, logger.Named("grants")), "")
	}
	return importer, func() {
		if err := store.Close(); err != nil {
			logger.Warn("closing the store", zap.Error(err))
		}
	}, nil
}

// ValidateImport checks the settings `gantry import confidant` uses: the import's own, and of the
// secrets service only the store, the KMS and the master key it seals under. The service's other
// settings (browser login, SESSION_SECRET, ACLs, certificates...) are Confidant's env file's as
// well, and a value gantry serve would refuse there must not stop an import that never reads it.
func (c Config) ValidateImport() error {
	if err := c.Import.Validate(); err != nil {
		return err
	}
	used := secrets.DefaultConfig()
	used.Store, used.BoltCheck, used.WriteStallTimeout = c.Secrets.Store, c.Secrets.BoltCheck, c.Secrets.WriteStallTimeout
	used.KMS, used.KMSMasterKey, used.KMSURL, used.AWSRegion = c.Secrets.KMS, c.Secrets.KMSMasterKey, c.Secrets.KMSURL, c.Secrets.AWSRegion
	used.KMSConnectionTimeout, used.KMSReadTimeout, used.DataKeyCacheSize = c.Secrets.KMSConnectionTimeout, c.Secrets.KMSReadTimeout, c.Secrets.DataKeyCacheSize
	used.Limits = c.Secrets.Limits // the import reports records beyond them
	if err := used.Validate(); err != nil {
		return err
	}
	if c.Secrets.Store == "etcd" {
		return c.Etcd.Validate()
	}
	return nil
}

// openKeys opens the KMS of the configuration over store and proves that it fits the store: the
// master key resolves and the store's key-check value opens with it (a replaced keyring fails here,
// before anything is served or imported).
func openKeys(ctx context.Context, cfg Config, store store.Store, logger *zap.Logger) (kms.Provider, error) {
	provider, err := openKMS(ctx, cfg, store, logger)
	if err != nil {
		return nil, err
	}
	if _, err := provider.ResolveKeyID(ctx, cfg.Secrets.KMSMasterKey); err != nil {
		return nil, fmt.Errorf("KMS_MASTER_KEY %q: %w", cfg.Secrets.KMSMasterKey, err)
	}
	if err := secrets.VerifyKeys(ctx, store, provider, cfg.Secrets.KMSMasterKey); err != nil {
		return nil, keysError(cfg, err)
	}
	return provider, nil
}

// openStore opens the configured storage backend: the bbolt file of the data folder, or etcd (shared
// by every replica; they must then also share the keyring, see the README's "Running on etcd").
func openStore(ctx context.Context, cfg Config, logger *zap.Logger) (store.Store, error) {
	if cfg.Secrets.Store == "etcd" {
		store, err := etcdstore.Open(ctx, cfg.Etcd, logger.Named("store"))
		if err != nil {
			return nil, err
		}
		logger.Info("secrets store on etcd", zap.Strings("endpoints", cfg.Etcd.Endpoints), zap.String("prefix", cfg.Etcd.Prefix))
		return store, nil
	}
	path := filepath.Join(cfg.DataDir, databaseFile)
	if info, err := os.Stat(path); err == nil && info.Size() == 0 {
		// An empty database file in a folder that never had a keyring is a new folder whose first
		// start was cut short: start afresh. Next to a keyring it is a lost database: refused.
		if _, err := os.Stat(filepath.Join(cfg.DataDir, keyringFile)); errors.Is(err, os.ErrNotExist) {
			_ = os.Remove(path)
		}
	}
	store, err := boltstore.Open(path, boltdb.Options{Timeout: time.Second, Check: cfg.Secrets.BoltCheck}, logger.Named("store"))
	if errors.Is(err, boltdb.ErrDamaged) {
		return nil, fmt.Errorf("%w. Gantry does not serve a damaged database: run `gantry check -data-dir %s` for every problem, then restore the data folder from a backup (SECURITY.md, Backups)", err, cfg.DataDir)
	}
	if err != nil {
		return nil, err
	}
	store.SetWriteStallTimeout(cfg.Secrets.WriteStallTimeout)
	return store, nil
}

// grantsAndRoles picks the grant manager and role lister of the key provider: gantry's own grant
// records in the secrets store and configured roles with the local keyring (grants are then
// enforced on service tokens), AWS KMS grants and IAM roles with AWS. The IAM roles cache refreshes
// in the background until the stack stops (onStop).
func grantsAndRoles(ctx context.Context, cfg Config, provider kms.Provider, deps *secrets.Deps, onStop func(func()), logger *zap.Logger) error {
	if aws, ok := provider.(*kms.AWS); ok {
		if cfg.Secrets.GrantRoleARNPrefix != "" {
			deps.Grants = kms.NewAWSGrants(aws, cfg.Secrets.GrantRoleARNPrefix, cfg.Secrets.Auth.MinTokenVersion, logger.Named("grants"))
		} else {
			logger.Warn("GANTRY_GRANT_ROLE_ARN_PREFIX is unset: KMS grants are not managed")
		}
		lister, err := iamroles.NewAWS(ctx, iamroles.AWSConfig{Region: cfg.Secrets.AWSRegion}, logger.Named("iam"))
		if err != nil {
			return err
		}
		cached := iamroles.NewCached(lister, cfg.Secrets.RolesRefresh, cfg.Secrets.RolesRefresh/10, logger.Named("iam"))
		cached.Start(context.WithoutCancel(ctx))
		deps.Roles = cached
		onStop(cached.Close)
		return nil
	}
	// The grant records live in the store, so every replica sharing it (etcd) enforces the same ones;
	// a grants.json that earlier versions kept in the data folder is merged into them first.
	grants := secrets.NewStoreGrants(deps.Store, logger.Named("grants"))
	if _, err := grants.ImportFile(ctx, filepath.Join(cfg.DataDir, grantsFile)); err != nil {
		return fmt.Errorf("data-dir: %w", err)
	}
	deps.Grants = grants
	if cfg.Secrets.KMSAuthManageGrants {
		deps.ServiceAllowed = grants.Allowed
	}
	deps.Roles = iamroles.Static(cfg.Secrets.Roles)
	return nil
}

// openJWTKeys loads the JWT signing keys: generated per environment into the data folder, with
// Confidant's JWT_CERTIFICATE_AUTHORITIES taking precedence for the environments it configures.
func openJWTKeys(cfg Config, logger *zap.Logger) (*jwtkeys.Store, error) {
	store, err := jwtkeys.Open(filepath.Join(cfg.DataDir, "jwt"), cfg.Secrets.JWTEnvironments, logger.Named("jwt"))
	if err != nil {
		return nil, err
	}
	if cfg.Secrets.JWTCertificateAuthorities != "" {
		configured, err := jwtkeys.FromConfidantSettings(cfg.Secrets.JWTCertificateAuthorities, cfg.Secrets.JWTActiveSigningKeys, logger.Named("jwt"))
		if err != nil {
			return nil, err
		}
		store.Merge(configured)
	}
	return store, nil
}

// sessionSecret returns the browser-session signing secret kept in the data folder, creating it on
// first start, so sessions survive restarts without configuration.
func sessionSecret(dataDir string) (string, error) {
	path := filepath.Join(dataDir, sessionKeyFile)
	if data, err := os.ReadFile(path); err == nil {
		// An existing key is used as it is, or refused: replacing it would silently log everyone out,
		// and a key others can read may already be copied.
		if err := secretfile.CheckPrivate(path); err != nil {
			return "", settings.Invalid("data-dir", "session key: %v", err)
		}
		if len(data) < 32 {
			return "", settings.Invalid("data-dir", "session key %s is %d bytes, too short to be one gantry wrote; restore it or delete it to log every browser out", path, len(data))
		}
		return string(data), nil
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	secret := hex.EncodeToString(b)
	if err := os.WriteFile(path, []byte(secret), 0o600); err != nil {
		return "", fmt.Errorf("data-dir: write %s: %w", path, err)
	}
	return secret, nil
}

// openKMS opens the key provider: AWS KMS, or the local keyring of the data folder. A keyring is
// created only for a store that has never held data: a missing keyring next to data is a lost key
// (restore it), never a reason to make a new one.
func openKMS(ctx context.Context, cfg Config, store store.Store, logger *zap.Logger) (kms.Provider, error) {
	if cfg.Secrets.KMS == "aws" {
		return kms.NewAWS(ctx, kms.AWSConfig{
			Region:         cfg.Secrets.AWSRegion,
			Endpoint:       cfg.Secrets.KMSURL,
			ConnectTimeout: cfg.Secrets.KMSConnectionTimeout,
			ReadTimeout:    cfg.Secrets.KMSReadTimeout,
		}, logger.Named("kms"))
	}
	keyringPath := filepath.Join(cfg.DataDir, keyringFile)
	if _, err := os.Stat(keyringPath); errors.Is(err, os.ErrNotExist) {
		used, err := storeInUse(ctx, store)
		if err != nil {
			return nil, err
		}
		if used {
			where := "restore keyring.json from your backup (gantry backup copies it)"
			if cfg.Secrets.Store == "etcd" {
				where = "copy keyring.json from a replica of this store, or restore it from your backup"
			}
			return nil, settings.Invalid("data-dir", "the keyring %s is missing but the store (%s) already holds data encrypted under it: %s; gantry never replaces a lost keyring", keyringPath, storeName(cfg), where)
		}
		if cfg.Secrets.Store == "etcd" {
			logger.Warn("creating a new local keyring for an empty etcd store: every secrets replica must use the same keyring.json (copy it from the first replica), or the others refuse to start",
				zap.String("keyring", keyringPath))
		}
	}
	return kms.OpenKeyring(keyringPath, logger.Named("keyring"))
}

// keyringUse returns the use record of the data folder's keyring (kms.KeyringUse), nil when gantry
// runs on AWS KMS, there is no keyring yet, or it was never marked.
//
// A keyring "has been used" when a gantry start proved that a store's key-check value opens with it
// (secrets.VerifyKeys) and recorded that in keyring.json (the "used" field; MarkUsed, at every start
// until it is there, so keyrings of older versions get it at their first start with this one). Every
// first start records a key-check value in the new store right after creating the keyring, so a
// keyring without the record has never protected data: provisioned ahead (etcd replicas), or its
// first start was cut short. A used keyring next to a store that is missing, or holds no key-check
// value and no data, means the store was lost (a wrong -data-dir mount, a deleted secrets.db, a
// wrong -etcd-prefix), and serving would answer 404 for every credential while accepting writes.
func keyringUse(cfg Config) (*kms.KeyringUse, error) {
	if cfg.Secrets.KMS == "aws" {
		return nil, nil
	}
	path := filepath.Join(cfg.DataDir, keyringFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	ring, err := kms.LoadKeyring(path, nil)
	if err != nil {
		return nil, settings.Invalid("data-dir", "%v", err)
	}
	return ring.Used(), nil
}

// lostStoreAdvice says what to do about a used keyring beside a missing or empty store; gantry
// check gives the same advice.
const lostStoreAdvice = "restore secrets.db from your backup (with -store=etcd: check -etcd-endpoints and -etcd-prefix), or point -data-dir at the folder that has it. " +
	"To start a new, empty store on purpose, move keyring.json out of the data folder (keep it: it decrypts the backups of the old store); gantry then makes a new keyring"

// lostStoreError refuses a used keyring beside a store that is missing or empty.
func lostStoreError(cfg Config, use *kms.KeyringUse, state string) error {
	return settings.Invalid("data-dir", "the store (%s) %s, but the keyring %s has protected a store since %s (%s): the store's data is probably lost or elsewhere, and gantry refuses to serve an empty store in its place (every credential would be 404, new writes accepted); %s",
		storeName(cfg), state, filepath.Join(cfg.DataDir, keyringFile), use.Since.Format(time.RFC3339), use.Store, lostStoreAdvice)
}

// storeInUse reports whether the store was ever initialised (a key-check value) or holds data.
func storeInUse(ctx context.Context, st store.Store) (bool, error) {
	if _, err := st.KeyCheck(ctx); err == nil {
		return true, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return false, err
	}
	return st.HasData(ctx)
}

func storeName(cfg Config) string {
	if cfg.Secrets.Store == "etcd" {
		return "etcd prefix " + cfg.Etcd.Prefix
	}
	return filepath.Join(cfg.DataDir, databaseFile)
}

// keysError names what to restore when the keys do not fit the store.
func keysError(cfg Config, err error) error {
	if !errors.Is(err, secrets.ErrKeysDoNotMatch) {
		return fmt.Errorf("checking the keys against the store: %w", err)
	}
	if cfg.Secrets.KMS == "aws" {
		return fmt.Errorf("KMS_MASTER_KEY: %w: %q (AWS KMS) is not the key the store (%s) was written with; configure that key", err, cfg.Secrets.KMSMasterKey, storeName(cfg))
	}
	return settings.Invalid("data-dir", "%w: the keyring %s is not the one the store (%s) was written with; restore the keyring.json of this store from your backup, or point -data-dir at the folder that has it. Gantry refuses to start rather than write new data under the wrong keys",
		err, filepath.Join(cfg.DataDir, keyringFile), storeName(cfg))
}

// warnOpenDataDir warns when other users can enter the data folder: gantry creates it 0700, but a
// folder made beforehand (a volume, a package) keeps its mode, and the keyring in it decrypts everything.
func warnOpenDataDir(dir string, logger *zap.Logger) {
	info, err := os.Stat(dir)
	if err != nil || info.Mode().Perm()&0o077 == 0 {
		return
	}
	logger.Warn("THE DATA FOLDER IS OPEN TO OTHER USERS: it holds the keyring and session key; chmod 700 it",
		zap.String("data_dir", dir), zap.String("mode", info.Mode().Perm().String()))
}

// replicaName tells this secrets replica apart from the others sharing its store: the host and the
// bound address of its gRPC listener (a loopback address alone would repeat across hosts).
func replicaName(secretsAddr string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + " " + secretsAddr
}
