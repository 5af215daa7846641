// Package stacktest runs gantry for tests: the configuration every suite starts from (Config), a
// stack that stops when its test ends (Start), the kmsauth tokens its local keyring mints (Token),
// and the listen flags of a gantry run as a child process (Addrs). The end-to-end, chaos, docs-check
// and cmd/gantry suites use it; each keeps its own settings by changing the Config it returns.
package stacktest
