package quota

import "github.com/runnerpool/terraform-provider-runnerpool/internal/condwrite"

// The ledger's conditional writes (internal/condwrite).
var (
	writeReserve      = condwrite.Declare("quota reserve")
	writeAdjust       = condwrite.Declare("quota adjust")
	writeResetCounter = condwrite.Declare("quota reset counter")
)
