// Command runnerpool-stack runs the local stack (DynamoDB Local, fauxqs, the EC2 server, the GitHub
// fake and the OIDC issuer, on 127.0.0.1) for `make stack` and `make test`.
//
//	runnerpool-stack [flags]                   start the stack, print its endpoints, run until SIGINT/SIGTERM
//	runnerpool-stack [flags] -- CMD [ARGS...]  start the stack, run CMD under its environment, stop the
//	                                           stack, exit with CMD's status
//
// Without a command it prints one NAME=URL line per endpoint, then "stack: ready". Whatever happens,
// it leaves no emulator process behind.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("runnerpool-stack", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: runnerpool-stack [flags] [-- CMD [ARGS...]]\n\n"+
			"Starts the local stack on 127.0.0.1. Without CMD: prints the endpoints and runs until SIGINT or\n"+
			"SIGTERM. With CMD: runs it with the stack's environment and exits with its status.\n\nflags:\n")
		fs.PrintDefaults()
	}
	var opts stack.Options
	fs.IntVar(&opts.Ports.DynamoDB, "dynamodb-port", 0, "DynamoDB Local port (0: a free port)")
	fs.IntVar(&opts.Ports.SQS, "sqs-port", 0, "fauxqs (SQS) port (0: a free port)")
	fs.IntVar(&opts.Ports.EC2, "ec2-port", 0, "EC2 server port (0: a free port)")
	fs.IntVar(&opts.Ports.GitHubAPI, "github-port", 0, "GitHub fake port (0: a free port)")
	fs.IntVar(&opts.Ports.OIDCIssuer, "oidc-port", 0, "OIDC issuer port (0: a free port)")
	fs.DurationVar(&opts.ReadyTimeout, "ready-timeout", stack.DefaultReadyTimeout, "how long to wait for the emulators to answer")
	fs.Float64Var(&opts.SQSSampling, "sqs-sampling", 0, "probability (0-1) that an SQS short poll comes back empty, as on real SQS with few messages (0: $"+stack.EnvSQSSampling+", unset: off)")
	verbose := fs.Bool("v", false, "log the servers and the emulators' output to stderr")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 1
	}
	if *verbose {
		opts.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		opts.ChildOutput = stderr
	}
	command := fs.Args()

	// Signals are caught from the start: SIGINT during the JVM's startup stops what has started.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-started:
		}
	}()

	st, err := stack.Start(ctx, opts)
	close(started)
	if err != nil {
		fmt.Fprintf(stderr, "runnerpool-stack: %v\n", err)
		return 1
	}
	var code int
	if len(command) == 0 {
		code = foreground(st, sigs, stdout, stderr)
	} else {
		code = runCommand(st, command, sigs, stdout, stderr)
	}
	if err := st.Close(); err != nil {
		fmt.Fprintf(stderr, "runnerpool-stack: stopping the stack: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// foreground prints the endpoints and waits for a signal (exit 0) or an emulator's death (exit 1).
func foreground(st *stack.Stack, sigs <-chan os.Signal, stdout, stderr io.Writer) int {
	for _, kv := range st.Env()[:5] {
		fmt.Fprintln(stdout, kv)
	}
	fmt.Fprintln(stdout, "stack: ready")
	select {
	case <-sigs:
		return 0
	case <-st.Done():
		fmt.Fprintf(stderr, "runnerpool-stack: %v\n", st.Err())
		return 1
	}
}

// runCommand runs command with the stack's environment, forwarding SIGINT and SIGTERM to it, and
// returns its exit status (128+N when a signal N ended it).
func runCommand(st *stack.Stack, command []string, sigs <-chan os.Signal, stdout, stderr io.Writer) int {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = append(os.Environ(), st.Env()...) // later entries win: the stack's values override
	cmd.Stdin = os.Stdin
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "runnerpool-stack: %v\n", err)
		return 1
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	stackDone := st.Done()
	for {
		select {
		case sig := <-sigs:
			_ = cmd.Process.Signal(sig)
		case <-stackDone:
			// The command's tests will fail on their own; say why.
			fmt.Fprintf(stderr, "runnerpool-stack: %v\n", st.Err())
			stackDone = nil
		case err := <-waited:
			var exitErr *exec.ExitError
			switch {
			case err == nil:
				return 0
			case errors.As(err, &exitErr):
				if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					return 128 + int(ws.Signal())
				}
				return exitErr.ExitCode()
			default:
				fmt.Fprintf(stderr, "runnerpool-stack: %s: %v\n", command[0], err)
				return 1
			}
		}
	}
}
