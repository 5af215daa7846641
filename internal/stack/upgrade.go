package stack

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/services/secrets/store/boltstore"
	"github.com/gantry-dev/gantry/services/secrets/store/codec"
	"github.com/gantry-dev/gantry/services/secrets/store/etcdstore"
)

// UpgradeOptions tune UpgradeRecords.
type UpgradeOptions struct {
	// Store is the store gantry runs with: "bolt" (or "") for the data folder's database, "etcd" for
	// the cluster Etcd names.
	Store string
	// Etcd reaches the cluster, for Store "etcd".
	Etcd etcdstore.Options
	// LockTimeout bounds the wait for the database file lock; 0 means boltdb.DefaultTimeout.
	LockTimeout time.Duration
}

// UpgradeRecords rewrites every record of the secrets store that is still in the JSON format of
// schema version 2 in the current (protobuf) format, and returns one result per record area: how many
// records it read and rewrote (gantry check -upgrade). The bbolt database of dir must not be in use
// (a running gantry holds its lock: stop it first); opening it moves its schema version to 3 first,
// as a start of gantry would. On etcd the upgrade is online, beside running replicas: it first moves
// the prefix from schema version 2 to 3 (after which builds reading only schema version 2 refuse to
// start, and running replicas write protobuf from their next store probe; see
// etcdstore.Store.UpgradeSchema), reported as its own result, then rewrites the records with a
// compare-and-set per record. A second run rewrites nothing.
func UpgradeRecords(ctx context.Context, dir string, opts UpgradeOptions) []CheckResult {
	var upgraded codec.Upgraded
	var err error
	var results []CheckResult
	if opts.Store == "etcd" {
		var schema *CheckResult
		schema, upgraded, err = upgradeEtcd(ctx, opts.Etcd)
		if schema != nil {
			results = append(results, *schema)
		}
	} else {
		upgraded, err = upgradeBolt(ctx, filepath.Join(dir, databaseFile), opts.LockTimeout)
	}
	for _, area := range slices.Sorted(func(yield func(string) bool) {
		for a := range upgraded {
			if !yield(a) {
				return
			}
		}
	}) {
		c := upgraded[area]
		results = append(results, CheckResult{
			Name:   "upgrade " + strings.TrimSuffix(area, "/"),
			Detail: fmt.Sprintf("%d records, %d rewritten from JSON to protobuf", c.Read, c.Rewritten),
		})
	}
	if err != nil {
		results = append(results, CheckResult{Name: "upgrade", Err: err})
	}
	return results
}

func upgradeBolt(ctx context.Context, path string, timeout time.Duration) (codec.Upgraded, error) {
	// Open would make a new, empty database where there is none.
	if _, err := os.Stat(path); errors.Is(err, iofs.ErrNotExist) {
		return nil, fmt.Errorf("no database at %s: wrong -data-dir? (with -store=etcd pass -store etcd and the -etcd-... flags)", path)
	}
	store, err := boltstore.Open(path, boltdb.Options{Timeout: timeout}, nil)
	if err != nil {
		if errors.Is(err, boltdb.ErrLocked) {
			err = fmt.Errorf("%w: gantry is probably running with this data folder; stop it first (-upgrade rewrites the database)", err)
		}
		return nil, err
	}
	upgraded, err := store.UpgradeRecords(ctx)
	if cerr := store.Close(); err == nil {
		err = cerr
	}
	return upgraded, err
}

func upgradeEtcd(ctx context.Context, opts etcdstore.Options) (*CheckResult, codec.Upgraded, error) {
	store, err := etcdstore.Open(ctx, opts, nil)
	if err != nil {
		return nil, nil, err
	}
	defer store.Close()
	moved, err := store.UpgradeSchema(ctx)
	if err != nil {
		return nil, nil, err
	}
	schema := &CheckResult{Name: "upgrade schema", Detail: "version 3 already: replicas write protobuf"}
	if moved {
		schema.Detail = "moved from version 2 to 3: replicas write protobuf from their next store probe; builds reading only schema version 2 now refuse to start"
	}
	upgraded, err := store.UpgradeRecords(ctx)
	return schema, upgraded, err
}
