// Package monitoring checks the chart's Grafana dashboard and Prometheus alert rules
// (charts/upgrade-repo: dashboards/upgrade-repo.json and templates/prometheusrule.yaml) against
// the code. Its tests render the chart with both enabled, parse every rule with Prometheus' own
// rule parser and every expression with its PromQL parser, and check that each metric a panel or
// a rule names is one that a running agent or sequencer exposes.
//
// It has no code of its own: it is a package so that Prometheus' parsers, a large module, are a
// dependency of these tests only and never of the binary.
//
// Imports: the standard library only, in its tests.
package monitoring
