// Package docs holds no code: its tests keep the README, the examples' READMEs and docs/guides
// honest. Every test a document cites exists, every path and relative link it names is in the
// repository, and every figure it states is the one the code or configuration sets, beside the
// test that shows the behaviour the figure belongs to (docs_test.go).
package docs
