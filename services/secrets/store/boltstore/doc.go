// Package boltstore is the bbolt adapter of the secrets service's storage: Store implements
// store.Store on an embedded bbolt file in the data folder (GANTRY_STORE=bolt, the default), and
// OpenReadOnly opens such a file for the offline tools (gantry check, gantry backup).
//
// Records and index keys are encoded by package codec, exactly as the etcd adapter (package
// etcdstore) encodes them; the bucket layout and its schema version are described in boltstore.go.
// The package passes the Store conformance suite (package store/storetest), run by its own tests,
// which also check after every subtest that each bbolt index agrees with the records. It imports the
// contract (package store), never the service (package secrets): internal/stack opens the store and
// hands it to the service, and the service's own tests open it directly.
package boltstore
