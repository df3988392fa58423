// Write tokens: how a conditional write recognises its own applied write.
//
// DynamoDB may apply a write and still not answer it (a 500 after the write, a connection dropped
// before the answer arrived); AWS says such a request "may or may not have succeeded". The SDK then
// retries the same request, and a conditional write's retry fails its condition against its own
// first attempt: a claim would read its own claim as a competitor's, a new run record as someone
// else's, a release's idle write as another release's.
//
// So every conditional write of the store carries a token of its own, drawn once per call (the
// SDK's retries resend the same request, token included), written on the item with the rest of the
// write, and asks DynamoDB for the item as it was when a condition fails
// (ReturnValuesOnConditionCheckFailure=ALL_OLD). A failed condition whose old item carries the
// call's token is the call's own earlier attempt: the write was applied, and the call succeeds with
// the item as it wrote it. Any later write replaces the token, so a write undone since is never
// taken for this call's.
package store

import (
	"crypto/rand"
	"encoding/hex"
	"errors"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// attrWrite is the token of the last conditional write applied to an item.
const attrWrite = "write_token"

// newWriteToken draws the token of one conditional write.
func newWriteToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b[:])
}

// ownWrite reports whether err is a failed condition against the write that carried token: an
// earlier attempt of the same call, applied, whose answer was lost. It returns the item as that
// attempt wrote it.
func ownWrite(err error, token string) (map[string]types.AttributeValue, bool) {
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) || len(ccf.Item) == 0 {
		return nil, false
	}
	v, ok := ccf.Item[attrWrite].(*types.AttributeValueMemberS)
	if !ok || v.Value != token {
		return nil, false
	}
	return ccf.Item, true
}

// isOwnWrite is ownWrite's answer alone.
func isOwnWrite(err error, token string) bool {
	_, own := ownWrite(err, token)
	return own
}
