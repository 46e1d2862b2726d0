//go:build race

package main

// The tests build the command with the race detector when they run with it.
func init() { raceBuild = true }
