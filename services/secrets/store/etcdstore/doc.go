// Package etcdstore is the etcd adapter of the secrets service's storage: Store implements
// secrets.Store on an etcd cluster, so several stateless secrets replicas can share one store
// (GANTRY_STORE=etcd). Its settings are secrets.EtcdOptions, part of the service's configuration.
//
// Records and index keys are encoded by package codec, exactly as the bbolt adapter
// (package boltstore) encodes them; the key layout under the prefix is described in etcdstore.go.
// The package passes the Store conformance suite (package storetest), run by its own tests, which
// also check after every subtest that each etcd index agrees with the records. The package imports
// secrets; secrets never imports it (internal/stack opens the store and hands it to the service).
package etcdstore
