// Package report writes what a simulator run gathered (sim.Result and its
// sim.Report time series) to a directory: JSON, CSV, a summary and plots.
package report
