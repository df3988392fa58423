package logship

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// File follows a log file from a byte offset: each complete line is an event timed when it is read
// (the bootstrap log's lines carry no time of their own). A file cut shorter than the offset is read
// again from its start; a missing file is waited for.
type File struct {
	Path string
	Poll time.Duration // how often the end of the file is looked at again (default 1 s)
}

// Name is the stream suffix of the bootstrap log.
func (f File) Name() string { return "bootstrap" }

// Run sends the file's lines after offset from.
func (f File) Run(ctx context.Context, from string, out chan<- Event) error {
	poll := f.Poll
	if poll <= 0 {
		poll = time.Second
	}
	offset := int64(0)
	if from != "" {
		n, err := strconv.ParseInt(from, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("bad saved offset %q of %s", from, f.Path)
		}
		offset = n
	}
	for {
		next, err := f.readFrom(ctx, offset, out)
		if err != nil {
			return err
		}
		offset = next
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// readFrom sends the complete lines after offset and returns the offset after the last one.
func (f File) readFrom(ctx context.Context, offset int64, out chan<- Event) (int64, error) {
	fh, err := os.Open(f.Path)
	if errors.Is(err, os.ErrNotExist) {
		return offset, nil
	}
	if err != nil {
		return offset, err
	}
	defer fh.Close()
	if fi, err := fh.Stat(); err != nil {
		return offset, err
	} else if fi.Size() < offset {
		offset = 0 // truncated or replaced
	}
	if _, err := fh.Seek(offset, io.SeekStart); err != nil {
		return offset, err
	}
	r := bufio.NewReader(fh)
	for {
		line, err := r.ReadString('\n')
		if err != nil { // an incomplete last line waits for its newline
			return offset, nil
		}
		offset += int64(len(line))
		select {
		case out <- Event{Time: time.Now(), Message: strings.TrimRight(line, "\r\n"), Position: strconv.FormatInt(offset, 10)}:
		case <-ctx.Done():
			return offset, ctx.Err()
		}
	}
}

// Journal follows the systemd journal through journalctl's JSON export, from the entry after a
// cursor, or from the start of this boot. Only entries of root (_UID 0) and of the kernel (no _UID)
// are sent: what a job writes to the journal, as the runner user, is not shipped.
type Journal struct {
	// Command is journalctl (tests substitute a script that speaks its JSON export).
	Command string
}

// Name is the stream suffix of the journal.
func (j Journal) Name() string { return "journal" }

// journalEntry holds the fields of journalctl -o json that the shipper reads. MESSAGE is a string, or
// an array of bytes when it is not valid UTF-8.
type journalEntry struct {
	Cursor     string          `json:"__CURSOR"`
	Realtime   string          `json:"__REALTIME_TIMESTAMP"` // microseconds since the epoch
	UID        *string         `json:"_UID"`
	Unit       string          `json:"_SYSTEMD_UNIT"`
	Identifier string          `json:"SYSLOG_IDENTIFIER"`
	Message    json.RawMessage `json:"MESSAGE"`
}

// Run runs journalctl and sends its entries until ctx ends or journalctl exits.
func (j Journal) Run(ctx context.Context, from string, out chan<- Event) error {
	cmdName := j.Command
	if cmdName == "" {
		cmdName = "journalctl"
	}
	args := []string{"--output=json", "--follow", "--no-tail", "--boot"}
	if from != "" {
		args = []string{"--output=json", "--follow", "--no-tail", "--after-cursor=" + from}
	}
	cmd := exec.CommandContext(ctx, cmdName, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", cmdName, err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		e, ok := journalEvent(sc.Bytes())
		if !ok {
			continue
		}
		select {
		case out <- e:
		case <-ctx.Done():
		}
	}
	err = cmd.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("%s exited: %v: %s", cmdName, err, strings.TrimSpace(stderr.String()))
}

// journalEvent turns one line of journalctl's JSON export into an event; false for an entry that is
// not root's or the kernel's, or that cannot be read.
func journalEvent(line []byte) (Event, bool) {
	var je journalEntry
	if err := json.Unmarshal(line, &je); err != nil || je.Cursor == "" {
		return Event{}, false
	}
	if je.UID != nil && *je.UID != "0" {
		return Event{}, false
	}
	msg := message(je.Message)
	source := je.Unit
	if source == "" {
		source = je.Identifier
	}
	if source != "" {
		msg = source + ": " + msg
	}
	t := time.Now()
	if us, err := strconv.ParseInt(je.Realtime, 10, 64); err == nil {
		t = time.UnixMicro(us)
	}
	return Event{Time: t, Message: msg, Position: je.Cursor}, true
}

// message reads MESSAGE: a string, or the bytes journalctl exports as an array of numbers.
func message(raw json.RawMessage) string {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s
	}
	var b []byte
	var nums []int
	if err := json.Unmarshal(raw, &nums); err == nil {
		for _, n := range nums {
			b = append(b, byte(n))
		}
		return strings.ToValidUTF8(string(b), "\uFFFD")
	}
	return ""
}
