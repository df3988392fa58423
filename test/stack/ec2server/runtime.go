// runtime.go: the instance runtime hook (what "runs inside" a running instance: in tests a Go
// func, in the demo and benchmarks a child process via ExecRuntime). A runtime starts each time
// its instance enters running and is cancelled when the instance leaves running, so a stop
// ends the process and a start runs a fresh one, like a reboot of the machine.
package ec2server

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"
)

type instanceRuntime struct {
	cancel context.CancelFunc
}

// startRuntimeLocked gives a newly running instance its IMDS endpoint (kept across stops) and
// runs Options.Runtime for it in a goroutine.
func (s *Server) startRuntimeLocked(in *instance) {
	if s.opts.Runtime == nil || s.closed {
		return
	}
	if in.imds == nil {
		m, err := s.startIMDSLocked(in.id)
		if err != nil {
			s.log.Error("ec2server: starting instance metadata listener", "instance", in.id, "err", err)
			return
		}
		in.imds = m
	}
	ctx, cancel := context.WithCancel(s.baseCtx)
	in.runtime = &instanceRuntime{cancel: cancel}
	v := in.view()
	ri := RuntimeInstance{
		ID: v.ID, InstanceType: v.InstanceType, AvailabilityZone: v.AvailabilityZone, ImageID: v.ImageID,
		Tags: v.Tags, IMDSEndpoint: v.IMDSEndpoint, UserData: v.UserData,
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("ec2server: runtime panicked", "instance", ri.ID, "panic", fmt.Sprint(r))
			}
		}()
		s.opts.Runtime(ctx, ri)
	}()
}

func (s *Server) stopRuntimeLocked(in *instance) {
	if in.runtime != nil {
		in.runtime.cancel()
		in.runtime = nil
	}
}

// ExecRuntime returns a Runtime that runs name with args as the instance's "machine": one
// child process per running period, with RUNNERPOOL_IMDS_ENDPOINT and
// AWS_EC2_METADATA_SERVICE_ENDPOINT pointing at the instance's IMDS and INSTANCE_ID set. When
// the instance stops or terminates (or the server closes) the process gets SIGTERM, then
// SIGKILL 5 s later. Its output and exit are logged through the server's Logger.
func ExecRuntime(name string, args ...string) func(ctx context.Context, inst RuntimeInstance) {
	return func(ctx context.Context, inst RuntimeInstance) {
		log := loggerFrom(ctx).With("instance", inst.ID, "cmd", name)
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(os.Environ(),
			"RUNNERPOOL_IMDS_ENDPOINT="+inst.IMDSEndpoint,
			"AWS_EC2_METADATA_SERVICE_ENDPOINT="+inst.IMDSEndpoint,
			"AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE=IPv4",
			"INSTANCE_ID="+inst.ID,
		)
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
		cmd.WaitDelay = 5 * time.Second // then SIGKILL, and stop waiting for its output pipes
		stdout := &lineLogger{log: log, stream: "stdout"}
		stderr := &lineLogger{log: log, stream: "stderr"}
		cmd.Stdout, cmd.Stderr = stdout, stderr

		started := time.Now()
		if err := cmd.Start(); err != nil {
			log.Error("ec2server: runtime did not start", "err", err)
			return
		}
		log.Info("ec2server: runtime started", "pid", cmd.Process.Pid)
		err := cmd.Wait()
		stdout.flush()
		stderr.flush()
		attrs := []any{"pid", cmd.Process.Pid, "ran", time.Since(started).Round(time.Millisecond), "cancelled", ctx.Err() != nil}
		if err != nil {
			attrs = append(attrs, "err", err)
		}
		log.Info("ec2server: runtime exited", attrs...)
	}
}

// lineLogger turns a child's output stream into one log record per line.
type lineLogger struct {
	log    *slog.Logger
	stream string
	buf    []byte
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.log.Info("ec2server: runtime output", "stream", l.stream, "line", string(bytes.TrimRight(l.buf[:i], "\r")))
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 64<<10 { // a very long line: log it in pieces
		l.flush()
	}
	return len(p), nil
}

func (l *lineLogger) flush() {
	if len(l.buf) > 0 {
		l.log.Info("ec2server: runtime output", "stream", l.stream, "line", string(l.buf))
		l.buf = nil
	}
}
