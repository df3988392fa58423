package declared

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
)

// PreRunnerScriptBudget is the room a pre-runner script has in EC2's 16 KiB of user data next to the
// largest bootstrap runnerpool renders, counted as the user data carries the script: gzip-compressed,
// then base64-encoded (PackPreRunnerScript): 4 KiB there is 3 KiB of gzip, which holds 6 to 7 KiB of
// a typical shell script (at cc50e7d the plan accepted 12 KiB, of which about 6.8 KiB fitted).
// internal/userdata's TestPreRunnerBudget renders the largest bootstrap with an incompressible script
// of this size and checks it fits.
const PreRunnerScriptBudget = 4096

// PackPreRunnerScript is the pre-runner script as the user data carries it: gzip (best compression,
// no name or time in the header, so the same script always packs the same), then standard base64.
func PackPreRunnerScript(s string) string {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression) // the level is valid
	_, _ = zw.Write([]byte(s))                             // writes to a bytes.Buffer do not fail
	_ = zw.Close()
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// IncompressibleText is n bytes of printable text that gzip cannot shrink much (a fixed pseudo-random
// sequence): the worst case of a pre-runner script, for tests of the budget.
func IncompressibleText(n int) string {
	const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	b := make([]byte, n)
	x := uint64(0x9e3779b97f4a7c15)
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = chars[x%uint64(len(chars))]
	}
	return string(b)
}
