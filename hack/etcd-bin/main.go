// Command etcd is the etcd server, built from its Go module (whose own go.mod uses local
// replace directives, so `go install` cannot build it directly).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
