// CPU profiles of the bench process over the passes a phase measures (runnerpool-bench -profile DIR).
package bench

import (
	"os"
	"path/filepath"
	"runtime/pprof"
)

// profile starts a CPU profile of the bench process into ProfileDir/name.pprof, when ProfileDir is
// set, and returns the function that stops it.
func (h *harness) profile(name string) func() {
	if h.o.ProfileDir == "" {
		return func() {}
	}
	f, err := os.Create(h.profilePath(name))
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		h.say("  no CPU profile: %v", err)
		return func() {}
	}
	h.dumpGoroutines(name)
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

// dumpGoroutines writes the bench process's goroutines, by stack, into ProfileDir/name.goroutines.txt
// when ProfileDir is set: what else runs in the process while a phase measures.
func (h *harness) dumpGoroutines(name string) {
	if h.o.ProfileDir == "" {
		return
	}
	f, err := os.Create(filepath.Join(h.o.ProfileDir, name+".goroutines.txt"))
	if err != nil {
		h.say("  no goroutine dump: %v", err)
		return
	}
	defer f.Close()
	_ = pprof.Lookup("goroutine").WriteTo(f, 1)
}

// profilePath is where a profile named name goes: empty when ProfileDir or name is.
func (h *harness) profilePath(name string) string {
	if h.o.ProfileDir == "" || name == "" {
		return ""
	}
	return filepath.Join(h.o.ProfileDir, name+".pprof")
}
