// Command etcd is etcd's own server main (etcdmain), built from this module so that the etcd behind
// the test's kube-apiserver is the version k8s.io/kubernetes itself requires: no etcd image or
// release binary can be downloaded here.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
