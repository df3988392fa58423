// Finding the local stack's emulator processes in /proc, for tests that check nothing is left behind.
package stacktest

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
)

// EmulatorProcesses lists the live DynamoDB Local processes listening on dynamoDBPort and fauxqs
// processes on sqsPort (0: none of that kind), as "PID COMMAND...". It recognises the command lines
// package stack runs (java ... DynamoDBLocal.jar ... -port N; node ... runnerpool-fauxqs N) and skips
// zombies. Linux only: elsewhere it returns nil.
func EmulatorProcesses(dynamoDBPort, sqsPort int) []string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var found []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		raw, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		args := strings.Split(string(bytes.TrimRight(raw, "\x00")), "\x00")
		match := (dynamoDBPort != 0 && slices.ContainsFunc(args, func(a string) bool { return strings.HasSuffix(a, "DynamoDBLocal.jar") }) &&
			follows(args, "-port", strconv.Itoa(dynamoDBPort))) ||
			(sqsPort != 0 && follows(args, "runnerpool-fauxqs", strconv.Itoa(sqsPort)))
		if !match || zombie(pid) {
			continue
		}
		found = append(found, strconv.Itoa(pid)+" "+summary(args))
	}
	return found
}

// follows reports whether args holds a immediately followed by b.
func follows(args []string, a, b string) bool {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == a && args[i+1] == b {
			return true
		}
	}
	return false
}

// zombie reports whether the process has exited but not been reaped (state Z or X in
// /proc/PID/stat), or is gone.
func zombie(pid int) bool {
	f, err := stack.ProcStat(pid)
	return err != nil || len(f) == 0 || f[0] == "Z" || f[0] == "X"
}

func summary(args []string) string {
	s := strings.Join(args, " ")
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}
