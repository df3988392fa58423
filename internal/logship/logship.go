// Package logship ships a runner instance's own logs to CloudWatch Logs, so that operators read why an
// instance did not register without reaching the instance: the user data's bootstrap log (a file,
// followed) and the systemd journal (journalctl's JSON export, followed). `runnerpool logs` runs it
// as a systemd unit of its own (internal/userdata renders it when a log group is given), so a logging
// problem never stops the agent.
//
// Each source goes to a stream of its own in the deployment's log group: <instance-id>/bootstrap and
// <instance-id>/journal. The instance's role needs logs:CreateLogStream and logs:PutLogEvents on that
// group and nothing else (it never creates the group, reads or deletes anything).
//
// A job on the runner is hostile code and can write to the journal (logger, systemd-cat): only the
// entries of root and of the kernel are shipped, never those of the runner user or any other.
//
// What was shipped is remembered in a state file per source (the journal's cursor, the file's offset),
// written after each accepted batch, so a restart resends at most one batch and skips nothing.
package logship

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs/types"
)

// API is the part of the CloudWatch Logs client the shipper uses; *cloudwatchlogs.Client satisfies it.
type API interface {
	CreateLogStream(ctx context.Context, in *cloudwatchlogs.CreateLogStreamInput, opts ...func(*cloudwatchlogs.Options)) (*cloudwatchlogs.CreateLogStreamOutput, error)
	PutLogEvents(ctx context.Context, in *cloudwatchlogs.PutLogEventsInput, opts ...func(*cloudwatchlogs.Options)) (*cloudwatchlogs.PutLogEventsOutput, error)
}

// PutLogEvents' documented quotas: a batch is at most 1,048,576 bytes, counted as the sum of its
// messages' UTF-8 bytes plus 26 bytes per event, and at most 10,000 events, in chronological order,
// spanning at most 24 hours; an event is at most 256 KB (the historical limit, kept so that every
// region accepts it).
const (
	maxBatchBytes   = 1_048_576
	eventOverhead   = 26
	maxBatchEvents  = 10_000
	maxBatchSpan    = 24 * time.Hour
	maxMessageBytes = 256*1024 - eventOverhead
)

// Event is one log line and the source's position just after it.
type Event struct {
	Time     time.Time
	Message  string
	Position string
}

// Source produces events from a position ("" is its beginning) until ctx ends or it fails.
type Source interface {
	Name() string // the stream's suffix: bootstrap, journal
	Run(ctx context.Context, from string, out chan<- Event) error
}

// Shipper ships one source to one stream.
type Shipper struct {
	API       API
	Group     string
	Stream    string
	Source    Source
	StateFile string        // where the position of the last shipped event is kept
	Flush     time.Duration // how long an event waits for others before it is sent (default 5 s)
	Log       *slog.Logger
}

// Run ships until ctx ends; a failed source or call is retried after a pause, never given up on.
func (s *Shipper) Run(ctx context.Context) error {
	if s.Flush <= 0 {
		s.Flush = 5 * time.Second
	}
	if s.Log == nil {
		s.Log = slog.Default()
	}
	for ctx.Err() == nil {
		if err := s.runOnce(ctx); err != nil && ctx.Err() == nil {
			s.Log.Warn("shipping logs", "stream", s.Stream, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
			}
		}
	}
	return nil
}

// runOnce runs the source from the saved position and ships what it produces, batch by batch.
func (s *Shipper) runOnce(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	from, err := s.position()
	if err != nil {
		return err
	}
	events := make(chan Event, 256)
	srcErr := make(chan error, 1)
	go func() { srcErr <- s.Source.Run(ctx, from, events) }()
	var pending []Event
	timer := time.NewTimer(s.Flush)
	defer timer.Stop()
	for {
		select {
		case e := <-events:
			pending = append(pending, e)
			if len(pending) < maxBatchEvents {
				continue
			}
		case <-timer.C:
			timer.Reset(s.Flush)
		case err := <-srcErr:
			if flushErr := s.ship(ctx, pending); flushErr != nil {
				return flushErr
			}
			return fmt.Errorf("%s source: %w", s.Source.Name(), err)
		}
		if err := s.ship(ctx, pending); err != nil {
			return err
		}
		pending = pending[:0]
	}
}

// ship sends events in as many batches as the quotas need, saving the position after each.
func (s *Shipper) ship(ctx context.Context, events []Event) error {
	for _, b := range Batches(events) {
		if err := s.put(ctx, b); err != nil {
			return err
		}
		if err := s.savePosition(b[len(b)-1].Position); err != nil {
			return err
		}
	}
	return nil
}

// put sends one batch, creating the stream when it does not exist yet.
func (s *Shipper) put(ctx context.Context, b []Event) error {
	in := &cloudwatchlogs.PutLogEventsInput{LogGroupName: aws.String(s.Group), LogStreamName: aws.String(s.Stream)}
	for _, e := range b {
		in.LogEvents = append(in.LogEvents, types.InputLogEvent{Timestamp: aws.Int64(e.Time.UnixMilli()), Message: aws.String(e.Message)})
	}
	out, err := s.API.PutLogEvents(ctx, in)
	var notFound *types.ResourceNotFoundException
	if errors.As(err, &notFound) {
		if err := s.createStream(ctx); err != nil {
			return err
		}
		out, err = s.API.PutLogEvents(ctx, in)
	}
	if err != nil {
		return fmt.Errorf("PutLogEvents %s/%s: %w", s.Group, s.Stream, err)
	}
	if r := out.RejectedLogEventsInfo; r != nil {
		s.Log.Warn("CloudWatch Logs rejected events (too old, too new or expired)", "stream", s.Stream,
			"too_old_end", aws.ToInt32(r.TooOldLogEventEndIndex), "too_new_start", aws.ToInt32(r.TooNewLogEventStartIndex), "expired_end", aws.ToInt32(r.ExpiredLogEventEndIndex))
	}
	return nil
}

func (s *Shipper) createStream(ctx context.Context) error {
	_, err := s.API.CreateLogStream(ctx, &cloudwatchlogs.CreateLogStreamInput{LogGroupName: aws.String(s.Group), LogStreamName: aws.String(s.Stream)})
	var exists *types.ResourceAlreadyExistsException
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("CreateLogStream %s/%s: %w", s.Group, s.Stream, err)
	}
	return nil
}

func (s *Shipper) position() (string, error) {
	b, err := os.ReadFile(s.StateFile)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the shipped position: %w", err)
	}
	return string(b), nil
}

// savePosition writes the position atomically (a crash leaves the old one or the new one).
func (s *Shipper) savePosition(pos string) error {
	tmp := s.StateFile + ".tmp"
	if err := os.MkdirAll(filepath.Dir(s.StateFile), 0o700); err != nil {
		return fmt.Errorf("saving the shipped position: %w", err)
	}
	if err := os.WriteFile(tmp, []byte(pos), 0o600); err != nil {
		return fmt.Errorf("saving the shipped position: %w", err)
	}
	if err := os.Rename(tmp, s.StateFile); err != nil {
		return fmt.Errorf("saving the shipped position: %w", err)
	}
	return nil
}

// Batches splits events into PutLogEvents batches within the documented quotas: messages cut to the
// event size limit (at a rune boundary), timestamps made non-decreasing, each batch within the byte,
// count and time-span limits.
func Batches(events []Event) [][]Event {
	var out [][]Event
	var cur []Event
	size := 0
	var last time.Time
	for _, e := range events {
		e.Message = truncate(e.Message)
		if e.Message == "" {
			e.Message = " " // CloudWatch Logs refuses an empty message
		}
		if e.Time.Before(last) {
			e.Time = last
		}
		last = e.Time
		n := len(e.Message) + eventOverhead
		if len(cur) > 0 && (size+n > maxBatchBytes || len(cur) == maxBatchEvents || e.Time.Sub(cur[0].Time) >= maxBatchSpan) {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, e)
		size += n
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

func truncate(m string) string {
	if len(m) <= maxMessageBytes {
		return m
	}
	m = m[:maxMessageBytes]
	for !utf8.ValidString(m) {
		m = m[:len(m)-1]
	}
	return m
}

// Options are what Run needs.
type Options struct {
	API          API
	Group        string
	InstanceID   string
	StateDir     string // the agent's root-only state directory: the positions are kept there
	BootstrapLog string
	Journalctl   string        // default journalctl
	Flush        time.Duration // default 5 s
	Log          *slog.Logger
}

// Streams are the names of an instance's streams: <instance-id>/bootstrap and <instance-id>/journal.
func Streams(instanceID string) (bootstrap, journal string) {
	return instanceID + "/bootstrap", instanceID + "/journal"
}

// Run ships the bootstrap log and the journal, each to its stream, until ctx ends.
func Run(ctx context.Context, o Options) error {
	if o.Group == "" || o.InstanceID == "" {
		return errors.New("logship: a log group and an instance id are required")
	}
	boot, journal := Streams(o.InstanceID)
	shippers := []*Shipper{
		{API: o.API, Group: o.Group, Stream: boot, Source: File{Path: o.BootstrapLog}, StateFile: filepath.Join(o.StateDir, "logs-bootstrap.position"), Flush: o.Flush, Log: o.Log},
		{API: o.API, Group: o.Group, Stream: journal, Source: Journal{Command: o.Journalctl}, StateFile: filepath.Join(o.StateDir, "logs-journal.position"), Flush: o.Flush, Log: o.Log},
	}
	done := make(chan error, len(shippers))
	for _, s := range shippers {
		go func() { done <- s.Run(ctx) }()
	}
	for range shippers {
		<-done
	}
	return ctx.Err()
}
