// Package etcdstore is the etcd adapter of the secrets service's storage: Store implements
// store.Store on an etcd cluster, so several stateless secrets replicas can share one store
// (GANTRY_STORE=etcd). Its settings are Options (the -etcd-* flags), which the process declares in
// its settings table next to the service's storage settings and checks when -store=etcd.
//
// Records and index keys are encoded by package codec, exactly as the bbolt adapter
// (package boltstore) encodes them; the key layout under the prefix is described in etcdstore.go.
// The package passes the Store conformance suite (package store/storetest), run by its own tests,
// which also check after every subtest that each etcd index agrees with the records. It imports the
// contract (package store), never the service (package secrets): internal/stack opens the store and
// hands it to the service.
package etcdstore
