package otel_test

import (
	"log"

	"github.com/XSAM/otelsql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/session"
)

// The example of docs/api.md: a pool opened through otelsql, adopted with
// session.Wrap. Spans go to the global tracer provider unless
// otelsql.WithTracerProvider names another.
func Example() {
	dsn := "postgres://app@db:5432/app?sslmode=disable"
	sqlDB, err := otelsql.Open("pgx", dsn, otelsql.WithAttributes(semconv.DBSystemPostgreSQL))
	if err != nil {
		log.Fatal(err)
	}
	db, err := session.Wrap(sqlDB) // recognises pgx under otelsql's driver
	if err != nil {
		log.Fatal(err)
	}
	e, err := election.New(db, election.WithNamespace("billing"))
	if err != nil {
		log.Fatal(err)
	}
	_ = e
}
