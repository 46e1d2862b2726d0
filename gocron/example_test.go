package gocron_test

import (
	"context"
	"log"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
	sqlelectgocron "github.com/sqlelect/sqlelect/gocron"
	"github.com/sqlelect/sqlelect/session"
)

// Every replica runs this; only the leader's scheduler runs the job.
func ExampleNew() {
	db, err := session.Open("postgres://app@db:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	e, err := election.New(db, election.WithNamespace("reports"))
	if err != nil {
		log.Fatal(err)
	}
	el, err := e.NewElector(uuid.New(), election.ElectorConfig{})
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = el.Run(context.Background()) }()

	s, err := gocron.NewScheduler(gocron.WithDistributedElector(sqlelectgocron.New(el)))
	if err != nil {
		log.Fatal(err)
	}
	_, err = s.NewJob(gocron.CronJob("0 3 * * *", false), gocron.NewTask(func() { /* the nightly report */ }))
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
}
