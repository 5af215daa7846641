// Package store is the storage contract of the secrets service, the shape of OpenBao's sdk/physical:
// the Store interface, the records it keeps (CredentialRecord, ServiceRecord, GrantsRecord,
// ArchivedCredential), the listing Page and the errors every implementation returns. It is a leaf:
// it imports neither the service (package secrets) nor any adapter, so both sides depend on it and
// never on each other.
//
// The contract, documented method by method on Store:
//   - Records passed in and returned are copies: callers may modify them.
//   - A write of revision N stores the immutable history record (id, N), the current record and
//     every index atomically: after a crash either all of it exists or none of it.
//   - Writes are compare-and-set on the current revision, so concurrent writers of one id never both
//     succeed with the same revision (ErrRevisionConflict).
//   - Failures are reported with this package's errors, wrapped or not (ErrNotFound,
//     ErrRevisionConflict, ErrStorage, *NameTakenError, ...), so the service decides with errors.Is
//     and errors.As whatever the backend.
//
// Implementations: the bbolt adapter (package store/boltstore) and the etcd adapter (package
// store/etcdstore), which share the stored form of the records (package store/codec). Every
// implementation passes the conformance suite, package store/storetest. internal/stack opens the
// configured adapter and hands it to the service.
package store
