// Command bench is make bench and make bench-peer: it starts gantry (bin/gantry serve) as a process
// of its own on free loopback ports with a new data folder, a bare net/http server process returning
// the same bytes as each read (this machine's limit, measured in the same run by the same generator),
// measures the raw 4 KiB fdatasync rate, and drives every workload from this process
// (internal/benchload), never from inside the server it measures. It prints one table: each figure,
// its share of its limit, the CPU the target process spent per request, and a header with the
// settings every figure was taken with.
//
//	bench [-gantry bin/gantry] [-duration 5s] [-rounds 2]     # make bench
//	bench peer [-gantry bin/gantry] [-bao $BAO] [-rounds 3]   # make bench-peer: gantry against OpenBao
//	bench flood [-gantry bin/gantry] [-conns 64] [-short]     # make bench-flood: reads and small writes under large-body floods
//	bench bare -addr 127.0.0.1:P -body FILE                   # the bare server (started by the others)
//	bench attack -url URL -conns N -credential FORM           # the attacking process of bench flood
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"time"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	cmd := "bench"
	if len(args) > 0 && (args[0] == "peer" || args[0] == "bare" || args[0] == "flood" || args[0] == "attack") {
		cmd, args = args[0], args[1:]
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	switch cmd {
	case "bare":
		err = runBare(ctx, args)
	case "peer":
		err = runPeer(ctx, args, stdout, stderr)
	case "flood":
		err = runFlood(ctx, args, stdout, stderr)
	case "attack":
		err = runAttack(args, stdout)
	default:
		err = runBench(ctx, args, stdout, stderr)
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	return 0
}

// runBare serves body on addr to every request until ctx ends: the limit a server of this machine
// reaches answering the same bytes from memory.
func runBare(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench bare", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	bodyFile := fs.String("body", "", "file of the answer's body")
	if err := fs.Parse(args); err != nil {
		return err
	}
	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: *addr, ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
