package stack

import (
	"os"
	"path/filepath"
)

// ToolsCache is where the tests keep what they build or download once (the Terraform and OpenTofu CLIs
// of tools/tf/ensure-terraform.sh, the Debian root file system of the user-data OS test):
// $RUNNERPOOL_TOOLS_CACHE, else $XDG_CACHE_HOME/runnerpool-tools, else ~/.cache/runnerpool-tools.
func ToolsCache() string {
	if dir := os.Getenv("RUNNERPOOL_TOOLS_CACHE"); dir != "" {
		return dir
	}
	if dir := os.Getenv("XDG_CACHE_HOME"); dir != "" {
		return filepath.Join(dir, "runnerpool-tools")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "runnerpool-tools")
}
