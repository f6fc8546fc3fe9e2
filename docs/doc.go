// Package docs holds the reference documentation, one Markdown file per
// reader (README.md maps them), and the tests that keep it whole: every
// relative link and #anchor in README.md and docs/*.md resolves, README.md
// names every file here, and .ci/run runs the test command README.md gives.
//
// Concurrency: the package has no code to call; it exists for its tests.
package docs
