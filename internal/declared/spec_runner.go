package declared

import (
	"crypto/sha256"
	"encoding/hex"
)

// SpecHashWithRunner is a warm pool's spec hash with the Actions runner version its instances
// install (the current release, which the class's launch template version renders into the user
// data): a new release changes it, so the pool rolls over onto instances that run it. An empty
// version (none known yet) leaves the hash as it is.
func SpecHashWithRunner(hash, runnerVersion string) string {
	if runnerVersion == "" {
		return hash
	}
	sum := sha256.Sum256([]byte(hash + "\x00runner=" + runnerVersion))
	return specHashVersion + hex.EncodeToString(sum[:16])
}
