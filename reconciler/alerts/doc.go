// Package alerts holds runnerpool's Prometheus alert rules (runnerpool.rules.yml) and their unit
// tests (runnerpool.rules_test.yml, run with promtool by TestAlertRules). It has no Go code: the
// package exists for its tests, which also check that every metric a rule names is one the
// reconciler exports.
package alerts
