//go:build linux

package agent

// Exported for the integration tests of package agent_test.
var ThrowawayUID = throwawayUID
