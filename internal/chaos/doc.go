// Package chaos holds gantry's long-running reliability tests: crash durability (the gantry process
// killed with SIGKILL under concurrent writes, then restarted on the same data folder; on etcd, a
// member process killed too) and the soak
// (mixed load with memory and goroutine sampling). Their short forms run with `make test`; `make chaos`
// and `make soak` run the long forms and print the figures.
package chaos
