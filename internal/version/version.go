// Package version holds the build identity of both binaries, set at link time by goreleaser
// (-X github.com/runnerpool/terraform-provider-runnerpool/internal/version.Version=...).
package version

// Version is the release version; "dev" for local builds.
var Version = "dev"

// Commit is the git commit the binary was built from, when known.
var Commit = "none"
