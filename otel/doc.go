// Package otel has no API: it tests, in a module of its own so that the
// core module does not depend on OpenTelemetry, that elections run on a
// pool instrumented with github.com/XSAM/otelsql, as docs/api.md shows:
// session.Wrap recognises the database under otelsql's driver, the
// statements are traced, and PostgreSQL's LISTEN reaches the pgx
// connection under otelsql's, so handoffs still wake followers at once.
package otel
