// Package storetest is the conformance suite of store.Store: the behaviour every storage backend of
// the secrets service must have, whatever it stores records in. The bbolt and etcd adapters (packages
// store/boltstore and store/etcdstore) run it; so must any other backend.
//
// # What a backend must satisfy
//
// The contract documented on store.Store, checked through the Store methods only:
//
//   - Round trips: every field of CredentialRecord and ServiceRecord comes back as written. Times keep
//     their nanoseconds (they are compared with time.Time.Equal, so the zone may come back as UTC);
//     nil and empty slices and maps are interchangeable; a nil pointer (Documentation, Account,
//     LastRotationDate, LastDecryptedDate) stays nil and a set one stays set.
//   - History: a write of revision N keeps every earlier revision unchanged and readable.
//   - Compare-and-set: writes succeed only when prevRevision is the current revision and the record
//     is revision prevRevision+1, otherwise ErrRevisionConflict, even under concurrent writers; the
//     store must be safe for concurrent use.
//   - Exact credential names are unique among current credentials (*NameTakenError names the holder);
//     names in another case are other names.
//   - Listings follow the documented order, honour Page.Limit (only the last page may be short,
//     limit 0 lists everything in one page) and reject tokens they did not issue for that very
//     listing with ErrBadPageToken.
//   - The credential→services index, *UnknownCredentialsError (sorted, deduplicated ids), blind
//     credentials left unindexed, archiving (ErrStillMapped, ErrRevisionConflict, then gone from every
//     read, listing and index but readable with GetArchivedCredential and listed by
//     ListArchivedCredentials by id with the time it was archived, its name free again).
//   - SetLastDecrypted, grants (point records, ids "" and "a\x00b" refused), the key check, HasData
//     and Probe.
//   - Key rewrap: RewrapCredential replaces the wrapped key of one history revision (and of the
//     current record when it is that revision) only over the exact key given, creating no revision
//     and changing no other field, LastDecryptedDate included; a stale key is ErrRevisionConflict,
//     an unknown, invalid or archived id or revision ErrNotFound, empty keys an error, and of
//     concurrent rewraps of one record with the same old key exactly one succeeds. ReplaceKeyCheck
//     is compare-and-set on the key-check value (ErrNotFound, ErrRevisionConflict, one winner).
//   - Login nonces: a nonce is claimed once (the second claim of a one-time login link is refused),
//     of concurrent claims exactly one wins, and they are not data for HasData.
//   - Change requests: every field of ChangeRequestRecord comes back as written, the approvals in
//     order and every time in UTC, DecidedAt nil or set as it was; puts are compare-and-set on
//     Version (a second create, a stale prevVersion, a Version other than prevVersion+1:
//     ErrRevisionConflict, nothing written), so of concurrent writers of one version exactly one
//     wins; ids "" and "a\x00b" are refused; ListChangeRequests lists by id and pages like every
//     listing; they are neither credentials, services nor data for HasData.
//   - Records passed in and returned are copies: mutating them never changes what the store holds.
//   - A cancelled context fails every call with an error wrapping context.Canceled, writing nothing.
//
// # Running it
//
// Call Run from a test of the backend's package with a constructor of empty stores. The constructor
// is called once per subtest (a few dozen times), with that subtest's t: it must return an open,
// empty store and close it at t.Cleanup. The cleanup is also the place for checks of the backend's
// own internals after each subtest (the bbolt and etcd adapters verify there that their indexes agree
// with the records):
//
//	package mystore_test
//
//	import (
//		"testing"
//
//		"github.com/gantry-dev/gantry/services/secrets/store"
//		"github.com/gantry-dev/gantry/services/secrets/store/storetest"
//	)
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store {
//			s, err := mystore.Open(t.TempDir())
//			if err != nil {
//				t.Fatalf("Open() error = %v", err)
//			}
//			t.Cleanup(func() {
//				if err := s.Close(); err != nil {
//					t.Errorf("Close() error = %v", err)
//				}
//			})
//			return s
//		})
//	}
//
// A backend shared between subtests (one server, as with etcd) gives each store its own empty
// namespace, such as a fresh key prefix.
//
// # Stored formats
//
// A backend that stores the bytes of package store/codec also runs RunStoredForms, with a Raw that
// reads and replaces its stored records past the Store methods (the bbolt and etcd adapters do it in
// their tests on the engine itself): a store whose records are in the JSON format of earlier
// versions reads exactly as in the current one, a write stores its records in the current format
// and leaves the history as it was, and the backend's upgrade pass (gantry check -upgrade) rewrites
// every JSON record, changes no read and rewrites nothing the second time.
package storetest
