// Package e2e holds end-to-end tests: they build the sawtooth binary, run it
// against the Gemini simulator on loopback, kill it for real and check every
// item afterwards. The package has no non-test code besides this comment.
package e2e
