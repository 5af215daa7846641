package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/codec"
	"github.com/gantry-dev/gantry/services/secrets/store/storetest"
)

// The rolling upgrade of etcd replicas from a schema version 2 build (JSON records only) to this one:
// while the prefix is at version 2, replicas of this build write JSON, which the version 2 replicas
// still running read; gantry check -upgrade (UpgradeRecords) moves the prefix to 3, and the running
// replicas of this build write protobuf from their next Probe.

// versionTwoPrefix returns the prefix (as Options.Prefix) of a store in the state a version 2
// build leaves it: schema version 2, a credential and a service in JSON.
func versionTwoPrefix(t *testing.T) string {
	t.Helper()
	s := newEtcdTestStore(t, nil)
	storetest.PutCred(t, s, storetest.NewCred("old", "old", 1), 0)
	storetest.PutService(t, s, storetest.NewService("oldsvc", 1, "old"), 0)
	raw := etcdRaw{s}
	for _, r := range raw.Records(t) {
		js, err := codec.EncodeJSON(r.Kind, []byte(r.Area), r.Value)
		if err != nil {
			t.Fatal(err)
		}
		raw.Replace(t, r, js)
	}
	if _, err := s.cli.Put(context.Background(), s.prefix+etcdSchemaKey, etcdSchemaJSON); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(s.prefix, "secrets/")
}

// openReplica opens another replica of prefix, closed at cleanup; UpgradeRecords does not wait for
// the replicas to probe (the tests call Probe themselves).
func openReplica(t *testing.T, prefix string) *Store {
	t.Helper()
	opts := DefaultOptions()
	opts.Endpoints = testEtcdEndpoints(t)
	opts.Prefix = prefix
	s, err := Open(context.Background(), opts, logtest.New(t))
	if err != nil {
		t.Fatalf("Open(%s): %v", prefix, err)
	}
	s.schemaSettle = 0
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// schemaOf is the schema version stored under the prefix of s.
func schemaOf(t *testing.T, s *Store) string {
	t.Helper()
	resp, err := s.cli.Get(context.Background(), s.prefix+etcdSchemaKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("no schema version under %s", s.prefix)
	}
	return string(resp.Kvs[0].Value)
}

// readAsVersionTwo reads every record under the prefix of s as a version 2 build does (the JSON of
// codec's legacy types, nothing else), and returns the keys it could not read: what would answer 500
// on a replica still running the old build.
func readAsVersionTwo(t *testing.T, s *Store) (unreadable []string, read int) {
	t.Helper()
	for _, r := range (etcdRaw{s}).Records(t) {
		var err error
		switch r.Kind {
		case codec.KindCred:
			err = json.Unmarshal(r.Value, new(codec.Cred))
		case codec.KindService:
			err = json.Unmarshal(r.Value, new(codec.Service))
		case codec.KindGrants:
			err = json.Unmarshal(r.Value, new(codec.Grants))
		case codec.KindArchived:
			var a codec.Archived
			if err = json.Unmarshal(r.Value, &a); err == nil {
				err = json.Unmarshal(a.Record, new(codec.Cred))
			}
		}
		read++
		if err != nil {
			unreadable = append(unreadable, fmt.Sprintf("%s%q", r.Area, r.Key))
		}
	}
	return unreadable, read
}

// formats counts the records under the prefix of s by format.
func formats(t *testing.T, s *Store) (json, proto int) {
	t.Helper()
	for _, r := range (etcdRaw{s}).Records(t) {
		f, err := codec.FormatOf([]byte(r.Area), r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if f == codec.FormatJSON {
			json++
		} else {
			proto++
		}
	}
	return json, proto
}

// TestEtcdRollingUpgrade walks the whole procedure with every kind of write: a replica of this build
// on a version 2 prefix writes JSON only (a version 2 replica reads everything); gantry check
// -upgrade moves the prefix to 3 and rewrites; the running replica writes protobuf after its next
// Probe, one that has not probed yet still writes JSON (read by all, rewritten by the next run);
// every record reads back on every replica throughout.
func TestEtcdRollingUpgrade(t *testing.T) {
	ctx := context.Background()
	prefix := versionTwoPrefix(t)
	a := openReplica(t, prefix)
	b := openReplica(t, prefix)
	if v := schemaOf(t, a); v != etcdSchemaJSON {
		t.Fatalf("schema after a new replica opened a version 2 prefix = %s, want it left at 2", v)
	}

	// Phase 1: writes of every kind on the new replicas, all JSON.
	c1 := storetest.NewCred("c1", "db", 1)
	storetest.PutCred(t, a, c1, 0)
	storetest.PutCred(t, b, storetest.NewCred("gone", "gone", 1), 0)
	svc := storetest.NewService("api", 1, "c1", "old")
	storetest.PutService(t, b, svc, 0)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(a.PutGrants(ctx, "api", store.GrantsRecord{Encrypt: true, Created: storetest.T0}))
	must(b.SetLastDecrypted(ctx, "c1", 1, storetest.T0))
	c1.LastDecryptedDate = storetest.TimePtr(storetest.T0)
	must(a.RewrapCredential(ctx, "c1", 1, c1.WrappedKey, []byte("rewrapped")))
	c1.WrappedKey = []byte("rewrapped")
	must(a.ArchiveCredential(ctx, "gone", 1, storetest.T0))
	if bad, n := readAsVersionTwo(t, a); len(bad) > 0 || n < 8 {
		t.Fatalf("before the upgrade a version 2 replica cannot read %v of %d records", bad, n)
	}
	if _, proto := formats(t, a); proto != 0 {
		t.Fatalf("%d protobuf records before the upgrade, want none", proto)
	}

	// Phase 2: gantry check -upgrade, on its own client. A write of a replica that has not probed
	// yet lands between the pass's read and its rewrite: it is kept, and rewritten.
	upgrader := openReplica(t, prefix)
	c2 := storetest.NextCred(c1)
	wrote := false
	upgrader.afterUpgradeRead = func() {
		if !wrote {
			wrote = true
			storetest.PutCred(t, a, c2, 1)
		}
	}
	if _, err := upgrader.UpgradeRecords(ctx); err != nil {
		t.Fatalf("UpgradeRecords: %v", err)
	}
	if v := schemaOf(t, a); v != etcdSchemaVersion {
		t.Fatalf("schema after the upgrade = %s, want %s", v, etcdSchemaVersion)
	}
	if json, _ := formats(t, a); json != 0 {
		t.Errorf("%d JSON records after the upgrade, want none", json)
	}

	// Phase 3: a probes and writes protobuf; b has not probed and still writes JSON.
	must(a.Probe(ctx))
	c3 := storetest.NextCred(c2)
	storetest.PutCred(t, a, c3, 2)
	s2 := storetest.NewService("api", 2, "c1")
	storetest.PutService(t, b, s2, 1)
	for key, want := range map[string]codec.Format{
		etcdCredCurrent + "c1":                               codec.FormatProto,
		etcdCredHistory + string(codec.RevKey("c1", 3)):      codec.FormatProto,
		etcdSvcCurrent + string(codec.NameKey("api", "api")): codec.FormatJSON,
	} {
		resp, err := a.cli.Get(ctx, a.prefix+key)
		must(err)
		if f, err := codec.FormatOf([]byte(key), resp.Kvs[0].Value); err != nil || f != want {
			t.Errorf("%q: format %q, %v; want %q", key, f, err, want)
		}
	}
	for _, s := range []*Store{a, b, upgrader} {
		storetest.CheckCred(t, s, "c1", 0, c3)
		storetest.CheckCred(t, s, "c1", 1, c1)
		storetest.CheckCred(t, s, "c1", 2, c2)
		storetest.CheckService(t, s, "api", 0, s2)
		storetest.CheckService(t, s, "api", 1, svc)
		if g, err := s.Grants(ctx, "api"); err != nil || !g.Encrypt {
			t.Errorf("Grants(api) = %+v, %v", g, err)
		}
		if got, err := s.GetArchivedCredential(ctx, "gone"); err != nil || got.Name != "gone" {
			t.Errorf("GetArchivedCredential(gone) = %+v, %v", got, err)
		}
	}
	// The next run rewrites b's JSON record; after its probe b writes protobuf too, and a replica
	// opened now writes it at once.
	up, err := upgrader.UpgradeRecords(ctx)
	if err != nil || up[etcdSvcCurrent].Rewritten != 1 || up[etcdSvcHistory].Rewritten != 1 {
		t.Errorf("second UpgradeRecords = %+v, %v; want b's service record and its history rewritten", up, err)
	}
	must(b.Probe(ctx))
	storetest.PutService(t, b, storetest.NewService("api", 3), 2)
	storetest.PutCred(t, openReplica(t, prefix), storetest.NewCred("late", "late", 1), 0)
	if json, _ := formats(t, a); json != 0 {
		t.Errorf("%d JSON records after every replica probed, want none", json)
	}
}

// TestEtcdRollingUpgradeConcurrent: two replicas of this build write concurrently through the whole
// procedure. Before the upgrade every record is JSON (a version 2 replica reads them all); the
// upgrade runs while both write; after both have probed every write is protobuf, and a second
// upgrade leaves no JSON record; every record reads back.
func TestEtcdRollingUpgradeConcurrent(t *testing.T) {
	ctx := context.Background()
	prefix := versionTwoPrefix(t)
	replicas := []*Store{openReplica(t, prefix), openReplica(t, prefix)}
	const creds = 6
	latest := make([][]*store.CredentialRecord, len(replicas)) // per replica, per credential
	for r := range replicas {
		latest[r] = make([]*store.CredentialRecord, creds)
	}
	// write puts `rounds` revisions of each credential of each replica, each followed by a
	// SetLastDecrypted stamp, the replicas concurrently, while during runs.
	write := func(rounds int, during func()) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, len(replicas))
		for r, s := range replicas {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					for i := range creds {
						prev := latest[r][i]
						next := storetest.NewCred(fmt.Sprintf("r%d-c%d", r, i), fmt.Sprintf("r%d-c%d", r, i), 1)
						var prevRev int32
						if prev != nil {
							next, prevRev = storetest.NextCred(prev), prev.Revision
						}
						if err := s.PutCredential(ctx, storetest.CloneCred(next), prevRev); err != nil {
							errs <- fmt.Errorf("replica %d: PutCredential(%s, %d): %w", r, next.ID, next.Revision, err)
							return
						}
						if err := s.SetLastDecrypted(ctx, next.ID, next.Revision, storetest.T0); err != nil {
							errs <- fmt.Errorf("replica %d: SetLastDecrypted(%s, %d): %w", r, next.ID, next.Revision, err)
							return
						}
						next.LastDecryptedDate = storetest.TimePtr(storetest.T0)
						latest[r][i] = next
					}
				}
			}()
		}
		if during != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				during()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if t.Failed() {
			t.FailNow()
		}
	}

	write(3, nil)
	if bad, n := readAsVersionTwo(t, replicas[0]); len(bad) > 0 || n < 2*creds*3 {
		t.Fatalf("before the upgrade a version 2 replica cannot read %v of %d records", bad, n)
	}
	upgrader := openReplica(t, prefix)
	var upErr error
	write(3, func() { _, upErr = upgrader.UpgradeRecords(ctx) })
	if upErr != nil {
		t.Fatalf("UpgradeRecords beside the writers: %v", upErr)
	}
	if v := schemaOf(t, upgrader); v != etcdSchemaVersion {
		t.Fatalf("schema after the upgrade = %s, want %s", v, etcdSchemaVersion)
	}
	for _, s := range replicas {
		if err := s.Probe(ctx); err != nil {
			t.Fatal(err)
		}
	}
	write(1, nil)
	// Every record the last round wrote (each credential's current and newest history record) is
	// protobuf, whatever the upgrade pass saw.
	for r, s := range replicas {
		for i := range creds {
			rec := latest[r][i]
			for _, key := range []string{etcdCredCurrent + rec.ID, etcdCredHistory + string(codec.RevKey(rec.ID, rec.Revision))} {
				resp, err := s.cli.Get(ctx, s.prefix+key)
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.Kvs) != 1 || resp.Kvs[0].Value[0] != byte(codec.FormatProto) {
					t.Errorf("%q written after the probe: %q, want protobuf", key, resp.Kvs)
				}
			}
		}
	}
	if _, err := upgrader.UpgradeRecords(ctx); err != nil {
		t.Fatal(err)
	}
	if json, proto := formats(t, upgrader); json != 0 || proto < 2*creds*7 {
		t.Errorf("after a second upgrade: %d JSON and %d protobuf records, want none and at least %d", json, proto, 2*creds*7)
	}
	for r := range replicas {
		for i := range creds {
			for _, s := range append(replicas, upgrader) {
				rec := latest[r][i]
				storetest.CheckCred(t, s, rec.ID, 0, rec)
			}
		}
	}
}

// TestEtcdUpgradeRecordsSettles: after moving the prefix to version 3 UpgradeRecords waits
// schemaSettle before reading the records, so replicas that probe meanwhile write protobuf; and it
// gives up, without rewriting, when its context ends first.
func TestEtcdUpgradeRecordsSettles(t *testing.T) {
	prefix := versionTwoPrefix(t)
	replica := openReplica(t, prefix) // at version 2: writes JSON
	upgrader := openReplica(t, prefix)
	upgrader.schemaSettle = 1 << 62 // never, but for the context
	ctx, cancel := context.WithCancel(context.Background())
	read := false
	upgrader.afterUpgradeRead = func() { read = true }
	done := make(chan error, 1)
	go func() {
		_, err := upgrader.UpgradeRecords(ctx)
		done <- err
	}()
	// The move is made before the wait: the replica's probe sees it while the pass waits (the
	// deadline only bounds a broken build).
	deadline := time.Now().Add(time.Minute)
	for replica.writer().Format != codec.FormatProto {
		if time.Now().After(deadline) {
			t.Fatal("the replica's probes never saw the move to version 3")
		}
		if err := replica.Probe(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-done; err == nil || read {
		t.Errorf("UpgradeRecords with its context cancelled during the wait: %v, read %v; want an error before any read", err, read)
	}
	if json, _ := formats(t, upgrader); json == 0 {
		t.Errorf("the JSON records were rewritten although the pass was cancelled")
	}
}

// TestEtcdNewPrefixStartsAtThree: an empty prefix needs no upgrade: it starts at version 3 and its
// records are protobuf from the first write.
func TestEtcdNewPrefixStartsAtThree(t *testing.T) {
	s := newEtcdTestStore(t, nil)
	if v := schemaOf(t, s); v != etcdSchemaVersion {
		t.Fatalf("schema of a new prefix = %s, want %s", v, etcdSchemaVersion)
	}
	storetest.PutCred(t, s, storetest.NewCred("c1", "db", 1), 0)
	if json, proto := formats(t, s); json != 0 || proto != 2 {
		t.Errorf("a new prefix holds %d JSON and %d protobuf records, want 0 and 2", json, proto)
	}
}

// TestEtcdChangeRequestsAtVersionTwo: on a prefix still at schema version 2, where this build writes
// JSON for the version 2 replicas, a change request is written in protobuf all the same (no version
// 2 build reads changes/: every record area it reads stays JSON and readable to it), reads back, and
// the upgrade pass (which moves the prefix to 3) neither counts nor changes it.
func TestEtcdChangeRequestsAtVersionTwo(t *testing.T) {
	ctx := context.Background()
	s := openReplica(t, versionTwoPrefix(t))
	req := storetest.NewChangeRequest("r1", 1)
	storetest.PutChange(t, s, req, 0)
	next := storetest.NextChangeRequest(req)
	storetest.PutChange(t, s, next, 1)
	storetest.PutCred(t, s, storetest.NewCred("c1", "c1", 1), 0) // JSON, for the version 2 replicas
	storetest.CheckChange(t, s, "r1", next)
	resp, err := s.cli.Get(ctx, s.key(etcdChangeReqs, []byte("r1")))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("changes/r1 = %v, %v", resp, err)
	}
	if f, err := codec.FormatOf(nil, resp.Kvs[0].Value); err != nil || f != codec.FormatProto {
		t.Errorf("the stored change request's format = %q, %v; want protobuf", f, err)
	}
	if unreadable, read := readAsVersionTwo(t, s); len(unreadable) > 0 || read == 0 {
		t.Errorf("a version 2 build cannot read %v of %d records", unreadable, read)
	}
	up, err := s.UpgradeRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, counted := up[etcdChangeReqs]; counted {
		t.Errorf("the upgrade pass counted changes/: %+v", up)
	}
	after, err := s.cli.Get(ctx, s.key(etcdChangeReqs, []byte("r1")))
	if err != nil || len(after.Kvs) != 1 || after.Kvs[0].ModRevision != resp.Kvs[0].ModRevision {
		t.Errorf("the upgrade pass rewrote changes/r1: %v, %v", after, err)
	}
	storetest.CheckChange(t, s, "r1", next)
}
