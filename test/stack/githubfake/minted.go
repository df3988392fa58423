package githubfake

import "time"

// Mint is one runner credential the fake handed out: what the invariant checker's credential-scope
// rule reads (a credential minted for a scope other than its run's is a violation).
type Mint struct {
	Kind  string // "registration", "remove" or "jit"
	Scope string // "owner/repo" or "owner", lower-case
	At    time.Time
}

// recordMintLocked notes a minted credential. s.mu must be held.
func (s *Server) recordMintLocked(kind string, sc scope) {
	s.minted = append(s.minted, Mint{Kind: kind, Scope: sc.String(), At: s.now()})
}

// Minted returns every runner credential minted so far, oldest first.
func (s *Server) Minted() []Mint {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Mint(nil), s.minted...)
}
