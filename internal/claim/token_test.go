package claim_test

import (
	"sync"
	"testing"
)

// A provision's runners share one registration token: concurrent callers wait for the one mint in
// flight, (the failure path is in token_internal_test.go).
func TestTokenSourceMintsOncePerRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, reg := e.claimer(testOptions())

	ts := reg.TokenFor("acme/api")
	ts.Start(t.Context())
	toks := make([]string, 20)
	var wg sync.WaitGroup
	for i := range toks {
		wg.Go(func() {
			tok, err := ts.Token(t.Context())
			if err != nil {
				t.Errorf("Token: %v", err)
			}
			toks[i] = tok.Token
		})
	}
	wg.Wait()
	for _, tok := range toks {
		if tok == "" || tok != toks[0] {
			t.Fatalf("tokens %v: want one shared token", toks)
		}
	}
	if n := e.ghsrv.Calls()[registrationTokenRoute]; n != 1 {
		t.Errorf("%d registration tokens minted for 20 callers, want 1", n)
	}

}
