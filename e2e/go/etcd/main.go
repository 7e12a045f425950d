// Command etcd is upstream etcd's server entry point, built through this wrapper
// module because go.etcd.io/etcd/server/v3 carries replace directives that
// `go install` refuses.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
