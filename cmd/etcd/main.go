// Command etcd is the etcd server built from its Go module (go.etcd.io/etcd/server/v3, the version in
// go.mod), so the scaled-out compose file (docker-compose.etcd.yml) runs etcd from a FROM scratch
// image built here: `go install` of etcd itself is refused (its go.mod has replace directives) and no
// image can be pulled. It takes etcd's own flags.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
